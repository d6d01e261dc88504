package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

const sleeperManifest = `
apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "exec sleep 100000"]}
`

// Two agents on one host, each with its own root dir, cgroup root and
// device-plugin dir, run pods side by side; each is restarted (once
// gracefully, once killed) and neither touches the other's pods. A third
// agent pointed at a root dir, cgroup root or device-plugin dir a live
// agent holds exits at start, naming the holder and the flag to change,
// and leaves the holder's pods and sockets alone; so does one pointed at
// the cgroup root of an agent that is stopped while its pods run.
func TestTwoAgentsNeverTouchEachOther(t *testing.T) {
	requireRoot(t)
	a, b := harness.New(t), harness.New(t)
	a.Start()
	b.Start()
	a.WriteManifest("sleeper.yaml", sleeperManifest)
	b.WriteManifest("sleeper.yaml", sleeperManifest)
	idA, idB := runningID(t, a), runningID(t, b)
	unchanged := func(when string) {
		t.Helper()
		for _, x := range []struct {
			agent *harness.Agent
			id    string
		}{{a, idA}, {b, idB}} {
			if got := runningID(t, x.agent); got != x.id {
				t.Errorf("%s: the pod of the agent on %s is now container %s, was %s", when, x.agent.RootDir, got, x.id)
			}
			if n := podProcs(t, x.agent); n == 0 {
				t.Errorf("%s: no process left in the pod cgroups under %s", when, x.agent.CgroupRoot)
			}
		}
	}

	sockB := filepath.Join(b.PluginDir, "kubelet.sock")
	sockInode := inodeOf(t, sockB)
	for _, tc := range []struct {
		flag   string
		holder *harness.Agent
		point  func(c *harness.Agent)
		value  string
	}{
		{"root-dir", a, func(c *harness.Agent) { c.RootDir = a.RootDir }, a.RootDir},
		{"cgroup-root", a, func(c *harness.Agent) { c.CgroupRoot = a.CgroupRoot }, a.CgroupRoot},
		{"device-plugin-dir", b, func(c *harness.Agent) { c.PluginDir = b.PluginDir }, b.PluginDir},
	} {
		c := harness.New(t)
		tc.point(c)
		out := runUntilExit(t, c)
		want := fmt.Sprintf("--%s %s is held by the minilet with root dir %s (pid %d); give this agent its own --%s",
			tc.flag, tc.value, tc.holder.RootDir, holderPID(t, tc.holder), tc.flag)
		if !strings.Contains(out, want) {
			t.Errorf("a third agent on the same --%s: output\n%s\nwant it to say: %s", tc.flag, out, want)
		}
	}
	if inodeOf(t, sockB) != sockInode {
		t.Error("the refused agent replaced the holder's kubelet.sock")
	}
	unchanged("after the refused agents")

	// A restarts gracefully and adopts its pod; B's is untouched.
	a.Stop()
	a.Start()
	unchanged("after restarting the first agent")

	// B dies without cleaning up: its locks die with it, and its next
	// run starts at once.
	if err := syscall.Kill(holderPID(t, b), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, "the killed agent's process is gone", func() (bool, string) {
		err := syscall.Kill(holderPID(t, b), 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprint(err)
	})
	b.Start()
	unchanged("after killing and restarting the second agent")

	// A is stopped; its pod keeps running in its cgroup root, which a
	// new agent must not take over (and clean up).
	a.Stop()
	c := harness.New(t)
	c.CgroupRoot = a.CgroupRoot
	out := runUntilExit(t, c)
	for _, want := range []string{
		"--cgroup-root " + a.CgroupRoot + " holds the cgroups of 1 pod(s) that the minilet with root dir " + a.RootDir + " left running while it is stopped",
		"give this agent its own --cgroup-root",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("an agent on a stopped agent's cgroup root: output\n%s\nwant it to say: %s", out, want)
		}
	}
	a.Start()
	unchanged("after an agent was refused the stopped agent's cgroup root")
}

// runningID waits for the agent's sleeper pod to run and returns its
// container ID; a restart count above 0 fails the test.
func runningID(t *testing.T, a *harness.Agent) string {
	t.Helper()
	name := a.Static("sleeper")
	var id string
	a.Eventually(name+" running on "+a.RootDir, func() (bool, string) {
		p, ok := a.Pod(name)
		s, found := containerStatus(p, "main")
		if !ok || !found || s.State.Running == nil || p.Status.Phase != v1.PodRunning {
			return false, describe(p, ok)
		}
		if s.RestartCount != 0 {
			t.Fatalf("%s restarted: %s", name, describe(p, ok))
		}
		id = s.ContainerID
		return true, ""
	})
	return id
}

// podProcs counts the processes in the pod cgroups under the agent's
// cgroup root (memory controller).
func podProcs(t *testing.T, a *harness.Agent) int {
	t.Helper()
	n := 0
	root := filepath.Join("/sys/fs/cgroup/memory", a.CgroupRoot, "kubepods")
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" || !strings.Contains(p, "/pod") {
			return nil
		}
		b, _ := os.ReadFile(p)
		n += len(strings.Fields(string(b)))
		return nil
	})
	return n
}

// holderPID is the pid the agent's root-dir lock records.
func holderPID(t *testing.T, a *harness.Agent) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.RootDir, "minilet.lock"))
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.PID == 0 {
		t.Fatalf("root dir lock %q: %v", b, err)
	}
	return h.PID
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// runUntilExit runs an agent as harness.Agent.Start would and expects it
// to exit non-zero at start; it returns what the agent printed.
func runUntilExit(t *testing.T, c *harness.Agent) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), harness.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(t), "run",
		"--root-dir", c.RootDir,
		"--pod-manifest-path", c.ManifestDir,
		"--port", "0",
		"--read-only-port", "0",
		"--cgroup-root", c.CgroupRoot,
		"--device-plugin-dir", c.PluginDir,
		"--hostname-override", c.NodeName,
	)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the agent did not exit within %v:\n%s", harness.Deadline, out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("the agent exited with %v, want a non-zero exit code:\n%s", err, out)
	}
	return string(out)
}
