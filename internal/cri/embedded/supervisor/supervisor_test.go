package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestParseStopSignal(t *testing.T) {
	for in, want := range map[string]string{"": "terminated", "SIGQUIT": "quit", "quit": "quit", "10": "user defined signal 1", "BOGUS": "terminated"} {
		if got := parseStopSignal(in).String(); got != want {
			t.Errorf("parseStopSignal(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestMonitorExecutableChoice(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "minilet")
	if got, err := MonitorExecutable("", self); err != nil || got != selfExe {
		t.Errorf("without a monitor binary: %q, %v; want %q", got, err, selfExe)
	}
	sibling := filepath.Join(dir, MonitorBinaryName)
	if err := os.WriteFile(sibling, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := MonitorExecutable("", self); got != selfExe {
		t.Errorf("with a non-executable monitor file: %q, want %q", got, selfExe)
	}
	if err := os.Chmod(sibling, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := MonitorExecutable("", self); err != nil || got != sibling {
		t.Errorf("with a monitor binary next to the agent: %q, %v; want %q", got, err, sibling)
	}
	other := filepath.Join(t.TempDir(), "mon")
	if _, err := MonitorExecutable(other, self); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "MonitorPath") {
		t.Errorf("missing configured monitor: err %v, want an invalid-argument error naming MonitorPath", err)
	}
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := MonitorExecutable(other, self); err != nil || got != other {
		t.Errorf("configured monitor: %q, %v; want %q", got, err, other)
	}
}

func TestExecHelperExecutableChoice(t *testing.T) {
	agentDir, monDir := t.TempDir(), t.TempDir()
	self, monitor := filepath.Join(agentDir, "minilet"), filepath.Join(monDir, MonitorBinaryName)
	if got, err := ExecHelperExecutable("", monitor, self); err != nil || got != monitor {
		t.Errorf("without an exec helper: %q, %v; want the monitor %q", got, err, monitor)
	}
	if got, err := ExecHelperExecutable("", selfExe, self); err != nil || got != selfExe {
		t.Errorf("without an exec helper or monitor binary: %q, %v; want %q", got, err, selfExe)
	}
	nextToAgent := filepath.Join(agentDir, ExecHelperBinaryName)
	if err := os.WriteFile(nextToAgent, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := ExecHelperExecutable("", selfExe, self); err != nil || got != nextToAgent {
		t.Errorf("exec helper next to the agent, no monitor binary: %q, %v; want %q", got, err, nextToAgent)
	}
	nextToMonitor := filepath.Join(monDir, ExecHelperBinaryName)
	if err := os.WriteFile(nextToMonitor, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := ExecHelperExecutable("", monitor, self); got != nextToAgent {
		t.Errorf("non-executable exec helper next to the monitor: %q, want the one next to the agent %q", got, nextToAgent)
	}
	if err := os.Chmod(nextToMonitor, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, _ := ExecHelperExecutable("", monitor, self); got != nextToMonitor {
		t.Errorf("exec helper next to the monitor: %q, want %q", got, nextToMonitor)
	}
	if _, err := ExecHelperExecutable(filepath.Join(monDir, "missing"), monitor, self); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "ExecHelperPath") {
		t.Errorf("missing configured exec helper: err %v, want an invalid-argument error naming ExecHelperPath", err)
	}
	if got, err := ExecHelperExecutable(nextToAgent, monitor, self); err != nil || got != nextToAgent {
		t.Errorf("configured exec helper: %q, %v; want %q", got, err, nextToAgent)
	}
}

func TestCgroupResources(t *testing.T) {
	if cgroupResources(nil) != nil {
		t.Error("no resources gave cgroup values")
	}
	got := cgroupResources(&Resources{CPUShares: 512, CPUQuota: -1, MemoryLimit: 64 << 20})
	switch {
	case got.CPUShares == nil || *got.CPUShares != 512:
		t.Errorf("shares %v", got.CPUShares)
	case got.CPUQuota == nil || *got.CPUQuota != -1:
		t.Errorf("quota %v", got.CPUQuota)
	case got.CPUPeriod != nil || got.PidsLimit != nil:
		t.Errorf("unset period or pids limit given a value: %+v", got)
	case *got.Memory != 64<<20 || got.MemorySwap == nil || *got.MemorySwap != 64<<20:
		t.Errorf("memory %v swap %v, want both 64MiB (no swapping past the limit)", got.Memory, got.MemorySwap)
	}
	if _, err := cgroupName("/"); err == nil {
		t.Error("the root cgroup was accepted as a container cgroup")
	}
}
