package cgroups

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestNaming(t *testing.T) {
	for _, tc := range []struct {
		name     Name
		cgroupfs string
		systemd  string
	}{
		{nil, "/", "/"},
		{Name{"kubepods"}, "/kubepods", "/kubepods.slice"},
		{Name{"kubepods", "burstable", "pod12-34"}, "/kubepods/burstable/pod12-34",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"},
		{Name{"minilet", "kubepods", "podab"}, "/minilet/kubepods/podab",
			"/minilet.slice/minilet-kubepods.slice/minilet-kubepods-podab.slice"},
	} {
		if got := NamingCgroupfs.Path(tc.name); got != tc.cgroupfs {
			t.Errorf("cgroupfs %v = %q, want %q", tc.name, got, tc.cgroupfs)
		}
		if got := NamingSystemd.Path(tc.name); got != tc.systemd {
			t.Errorf("systemd %v = %q, want %q", tc.name, got, tc.systemd)
		}
	}
}

func TestParseCgroupfs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Name
		bad  bool
	}{
		{"", nil, false}, {"/", nil, false}, {"/minilet", Name{"minilet"}, false},
		{"a//b/", Name{"a", "b"}, false}, {"/a/../b", nil, true}, {"./a", nil, true},
	} {
		got, err := ParseCgroupfs(tc.in)
		if tc.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseCgroupfs(%q) err = %v, want invalid argument", tc.in, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseCgroupfs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDetect(t *testing.T) {
	v2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := Detect(v2); err != nil || m != ModeV2 {
		t.Errorf("unified root with controllers: %v, %v; want v2", m, err)
	}
	empty2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty2, "cgroup.controllers"), []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Detect(empty2); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("unified root without controllers: err = %v, want unavailable", err)
	}
	if _, err := Detect(t.TempDir()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("no cgroups: err = %v, want unavailable", err)
	}
	if _, err := New(Config{MountRoot: v2, Naming: "bogus"}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("bad naming: err = %v", err)
	}
}

// TestV1Lifecycle runs against the machine's real cgroup v1 hierarchies.
func TestV1Lifecycle(t *testing.T) {
	d := requireV1(t)
	root := testRoot(t, d)
	pod := root.Child("kubepods").Child("burstable").Child("pod1")
	res := &Resources{CPUShares: ptr(uint64(512)), CPUQuota: ptr(int64(50000)), CPUPeriod: ptr(uint64(100000)),
		Memory: ptr(int64(64 << 20)), PidsLimit: ptr(int64(100))}
	if err := d.Create(pod, res); err != nil {
		t.Fatal(err)
	}
	if !d.Exists(pod) {
		t.Fatal("created cgroup does not exist")
	}
	rel := d.Path(pod)
	for _, f := range []struct{ ctrl, file, want string }{
		{"cpu", "cpu.shares", "512"}, {"cpu", "cpu.cfs_quota_us", "50000"}, {"cpu", "cpu.cfs_period_us", "100000"},
		{"memory", "memory.limit_in_bytes", "67108864"}, {"pids", "pids.max", "100"},
	} {
		if got := strings.TrimSpace(readFile(t, DefaultMountRoot, f.ctrl, rel, f.file)); got != f.want {
			t.Errorf("%s/%s = %s, want %s", f.ctrl, f.file, got, f.want)
		}
	}
	if got := readFile(t, DefaultMountRoot, "cpuset", rel, "cpuset.cpus"); strings.TrimSpace(got) == "" {
		t.Error("cpuset.cpus of the new cgroup is empty; tasks could not join it")
	}

	if err := d.Update(pod, &Resources{CPUQuota: ptr(int64(-1)), Memory: ptr(int64(-1)), PidsLimit: ptr(int64(-1))}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(readFile(t, DefaultMountRoot, "cpu", rel, "cpu.cfs_quota_us")); got != "-1" {
		t.Errorf("quota after update = %s, want -1", got)
	}
	if got := strings.TrimSpace(readFile(t, DefaultMountRoot, "pids", rel, "pids.max")); got != "max" {
		t.Errorf("pids.max after update = %s, want max", got)
	}
	if err := d.Update(root.Child("missing"), res); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("update of missing cgroup: err = %v, want not found", err)
	}

	// A process in a child cgroup (as a container would be) is found,
	// counted, and killed by Destroy of the pod.
	ctr := pod.Child("ctr1")
	if err := d.Create(ctr, nil); err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, "spin")
	if err := d.Join(ctr, w.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := d.Pids(pod)
	if err != nil || !slices.Contains(pids, w.cmd.Process.Pid) {
		t.Fatalf("Pids(pod) = %v, %v; want it to contain %d", pids, err, w.cmd.Process.Pid)
	}
	st, err := d.Stats(pod)
	if err != nil {
		t.Fatal(err)
	}
	// Only the task count: memory charged before the move stays behind.
	if st.Pids == 0 {
		t.Errorf("stats of a cgroup with a live process: %+v", st)
	}
	if kids, err := d.Children(root.Child("kubepods").Child("burstable")); err != nil || !slices.Equal(kids, []string{"pod1"}) {
		t.Errorf("Children = %v, %v; want [pod1]", kids, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Destroy(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := w.wait(t); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("leftover process ended with %v, want SIGKILL", err)
	}
	if d.Exists(pod) {
		t.Error("pod cgroup still exists after Destroy")
	}
	for _, ctrl := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids"} {
		if _, err := os.Stat(filepath.Join(DefaultMountRoot, ctrl, rel)); !os.IsNotExist(err) {
			t.Errorf("%s hierarchy still has %s (%v)", ctrl, rel, err)
		}
	}
	if err := d.Destroy(ctx, pod); err != nil {
		t.Errorf("destroying a missing cgroup: %v", err)
	}
	if err := d.Destroy(ctx, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("destroying the root: err = %v, want invalid argument", err)
	}
}

// TestV1CPUQuota checks that a 0.2 CPU quota really throttles a busy loop,
// measured with cpuacct. Only an upper bound is asserted (a busy machine
// can only lower the usage), with a generous margin.
func TestV1CPUQuota(t *testing.T) {
	d := requireV1(t)
	cg := testRoot(t, d).Child("quota")
	if err := d.Create(cg, &Resources{CPUQuota: ptr(int64(20000)), CPUPeriod: ptr(uint64(100000))}); err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, "spin")
	if err := d.Join(cg, w.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	// Wait until the loop is charged to the cgroup at all.
	deadline := time.Now().Add(30 * time.Second)
	var start *Stats
	for {
		st, err := d.Stats(cg)
		if err != nil {
			t.Fatal(err)
		}
		if st.CPUUsageNanos > 0 {
			start = st
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("busy loop never used CPU in its cgroup")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	time.Sleep(1500 * time.Millisecond) // the measurement window, not a wait for a condition
	end, err := d.Stats(cg)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(t0)
	cores := float64(end.CPUUsageNanos-start.CPUUsageNanos) / float64(wall.Nanoseconds())
	t.Logf("busy loop under a 0.2 CPU quota used %.3f cores over %v", cores, wall)
	if cores >= 0.5 {
		t.Fatalf("busy loop used %.3f cores, quota is 0.2", cores)
	}
}

// TestV1OOMKill puts a process that touches 100 MiB into a 32 MiB memory
// cgroup: the kernel must kill it and count the kill.
func TestV1OOMKill(t *testing.T) {
	d := requireV1(t)
	cg := testRoot(t, d).Child("oom")
	if err := d.Create(cg, &Resources{Memory: ptr(int64(32 << 20))}); err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, "alloc")
	if err := d.Join(cg, w.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	err := w.wait(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("allocating process ended with %v, want SIGKILL by the OOM killer", err)
	}
	st, err := d.Stats(cg)
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills < 1 {
		t.Fatalf("oom_kill counter = %d, want >= 1", st.OOMKills)
	}
	if st.MemoryLimit != 32<<20 {
		t.Errorf("memory limit = %d, want %d", st.MemoryLimit, 32<<20)
	}
}
