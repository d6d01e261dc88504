package conformance

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cgroupFile returns the path of file in the container's cgroup for
// controller: <mount>/<controller>/<parent>/<id> on v1, <mount>/<parent>/<id>
// on v2; runtimes that name the leaf differently (…<id>.scope) are found by
// searching the parent.
func (s *suite) cgroupFile(t *testing.T, p *pod, id, controller, file string) string {
	t.Helper()
	parent := p.config.GetLinux().GetCgroupParent()
	base := filepath.Join(s.opts.CgroupMount, controller, parent)
	if _, err := os.Stat(filepath.Join(s.opts.CgroupMount, "cgroup.controllers")); err == nil {
		base = filepath.Join(s.opts.CgroupMount, parent)
	}
	if _, err := os.Stat(filepath.Join(base, id)); err == nil {
		return filepath.Join(base, id, file)
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if e.IsDir() && strings.Contains(e.Name(), id) {
			return filepath.Join(base, e.Name(), file)
		}
	}
	t.Fatalf("no cgroup for container %s under %s", id, base)
	return ""
}

func (s *suite) isV2() bool {
	_, err := os.Stat(filepath.Join(s.opts.CgroupMount, "cgroup.controllers"))
	return err == nil
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return strings.TrimSpace(string(data))
}

func (s *suite) testCgroupLimits(t *testing.T) { s.cgroupLimits(t, true) }

// testOwnCgroupLimits is testCgroupLimits for a container in a PID
// namespace of its own, whose pid means nothing on the host.
func (s *suite) testOwnCgroupLimits(t *testing.T) { s.cgroupLimits(t, false) }

func (s *suite) cgroupLimits(t *testing.T, hostPID bool) {
	ctx := context.Background()
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	cfg := s.containerConfig("limited", "/bin/sh", "-c", "echo $$; exec sleep 1000")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 64 << 20, CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000,
	}
	id := s.run(t, rt, p, cfg)
	logPath := status(t, rt, id).GetLogPath()
	var pid string
	waitFor(t, "the container to print its pid", func() bool {
		data, err := os.ReadFile(logPath)
		if err != nil {
			return false
		}
		// Only complete lines: the monitor may be mid-write.
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if _, rest, ok := strings.Cut(l, " stdout F "); ok && strings.HasSuffix(rest, "\n") {
				pid = strings.TrimSpace(rest)
				return true
			}
		}
		return false
	})
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("container printed %q, want its pid", pid)
	}

	memCtl, memFile := "memory", "memory.limit_in_bytes"
	if s.isV2() {
		memCtl, memFile = "", "memory.max"
	}
	if got := readTrim(t, s.cgroupFile(t, p, id, memCtl, memFile)); got != strconv.Itoa(64<<20) {
		t.Errorf("%s = %s, want %d", memFile, got, 64<<20)
	}
	if s.isV2() {
		if got := readTrim(t, s.cgroupFile(t, p, id, "", "cpu.max")); got != "50000 100000" {
			t.Errorf("cpu.max = %q, want %q", got, "50000 100000")
		}
	} else {
		if got := readTrim(t, s.cgroupFile(t, p, id, "cpu", "cpu.shares")); got != "512" {
			t.Errorf("cpu.shares = %s, want 512", got)
		}
		if got := readTrim(t, s.cgroupFile(t, p, id, "cpu", "cpu.cfs_quota_us")); got != "50000" {
			t.Errorf("cpu.cfs_quota_us = %s, want 50000", got)
		}
	}
	procs := strings.Fields(readTrim(t, s.cgroupFile(t, p, id, memCtl, "cgroup.procs")))
	found := false
	for _, pp := range procs {
		found = found || pp == pid
	}
	if hostPID && !found {
		t.Errorf("container process %s is not in its memory cgroup (procs %v)", pid, procs)
	}
	// A container from an image reads its own limits where programs look
	// for them (runc mounts the container's cgroups at /sys/fs/cgroup).
	inside := "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	if s.isV2() {
		inside = "/sys/fs/cgroup/memory.max"
	}
	seesOwn := func(want int) {
		t.Helper()
		if s.opts.Image == "host" {
			return // a host-image container sees the host's /sys/fs/cgroup
		}
		out, stderr, err := rt.ExecSync(ctx, id, []string{"cat", inside}, 10*time.Second)
		if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(want) {
			t.Errorf("in the container, %s = %q (%v, %s), want %d", inside, out, err, stderr, want)
		}
	}
	seesOwn(64 << 20)

	if err := rt.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 128 << 20, CpuShares: 1024, CpuQuota: 50000, CpuPeriod: 100000,
	}}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	if got := readTrim(t, s.cgroupFile(t, p, id, memCtl, memFile)); got != strconv.Itoa(128<<20) {
		t.Errorf("after update %s = %s, want %d", memFile, got, 128<<20)
	}
	seesOwn(128 << 20)
}

func (s *suite) testOOMKilled(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	cfg := s.containerConfig("hog", "python3", "-c", "a = []\nwhile True:\n    a.append('x' * (1 << 20))\n")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}
	id := s.run(t, rt, p, cfg)
	st := waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if st.GetReason() != "OOMKilled" || st.GetExitCode() != 137 {
		t.Errorf("reason %q exit code %d, want OOMKilled 137", st.GetReason(), st.GetExitCode())
	}
}

func (s *suite) testRestartSurvival(t *testing.T) {
	if s.opts.Restart == nil {
		t.Skip("the runtime under test does not support restarts (no Restart option)")
	}
	ctx := context.Background()
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	dir := t.TempDir()
	long := s.run(t, rt, p, s.containerConfig("long", "/bin/sh", "-c",
		"echo started; while [ ! -e "+dir+"/release ]; do sleep 0.05; done; echo released; exit 7"))
	early := s.run(t, rt, p, s.containerConfig("early", "/bin/sh", "-c",
		"while [ ! -e "+dir+"/release-early ]; do sleep 0.05; done; touch "+dir+"/early-done; exit 5"))
	before := status(t, rt, long)
	waitLog(t, before.GetLogPath(), "started")

	rt.RuntimeUnderTest = s.opts.Restart(t, rt.RuntimeUnderTest, func() {
		// This container exits while no runtime is watching.
		if err := os.WriteFile(filepath.Join(dir, "release-early"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the early container to finish", func() bool {
			_, err := os.Stat(filepath.Join(dir, "early-done"))
			return err == nil
		})
	})

	after := status(t, rt, long)
	if after.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || after.GetStartedAt() != before.GetStartedAt() {
		t.Fatalf("after restart: state %v startedAt %d, want RUNNING %d", after.GetState(), after.GetStartedAt(), before.GetStartedAt())
	}
	if st := waitState(t, rt, early, runtimeapi.ContainerState_CONTAINER_EXITED); st.GetExitCode() != 5 {
		t.Errorf("container that exited during the restart: exit code %d, want 5", st.GetExitCode())
	}
	sb, err := rt.PodSandboxStatus(ctx, p.id, false)
	if err != nil || sb.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox after restart: %v, %v; want READY", sb, err)
	}
	out, _, err := rt.ExecSync(ctx, long, []string{"echo", "still here"}, 30*time.Second)
	if err != nil || string(out) != "still here\n" {
		t.Errorf("ExecSync after restart = %q, %v", out, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, rt, long, runtimeapi.ContainerState_CONTAINER_EXITED)
	if st.GetExitCode() != 7 || st.GetReason() != "Error" {
		t.Errorf("re-adopted container: exit code %d reason %q, want 7 Error", st.GetExitCode(), st.GetReason())
	}
	if got := logText(readLog(t, st.GetLogPath()), "stdout"); len(got) != 2 || got[1] != "released" {
		t.Errorf("log of re-adopted container = %q, want [started released]", got)
	}
}
