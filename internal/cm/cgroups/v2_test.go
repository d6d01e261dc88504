package cgroups

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/clock"
)

// TestV2DirectoryTree exercises the cgroup v2 driver against a plain
// directory tree laid out like a unified hierarchy: this machine's cgroup2
// mount has no controllers (they are bound to the v1 hierarchies), so a
// real v2 mount with cpu and memory cannot be had here. The tree checks the
// files written and the stats parsed; the kernel's enforcement is covered
// by the v1 tests.
func TestV2DirectoryTree(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids rdma misc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := newV2(Config{MountRoot: root, Naming: NamingSystemd, Controllers: DefaultControllers, Clock: clock.RealClock{}}, true)
	if err != nil {
		t.Fatal(err)
	}
	pod := Name{"kubepods", "burstable", "pod-1"}
	if err := d.Create(pod, &Resources{CPUShares: ptr(uint64(1024)), CPUQuota: ptr(int64(150000)), CPUPeriod: ptr(uint64(100000)),
		Memory: ptr(int64(128 << 20)), PidsLimit: ptr(int64(42))}); err != nil {
		t.Fatal(err)
	}
	rel := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod_1.slice"
	if d.Path(pod) != "/"+rel {
		t.Fatalf("Path = %s, want /%s", d.Path(pod), rel)
	}
	dir := filepath.Join(root, rel)
	for file, want := range map[string]string{
		"cpu.weight": "39", "cpu.max": "150000 100000", "memory.max": "134217728", "pids.max": "42",
	} {
		if got := readFile(t, dir, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// Every ancestor delegates the controllers to its children.
	for _, anc := range []string{root, filepath.Join(root, "kubepods.slice"), filepath.Dir(dir)} {
		got := strings.Fields(readFile(t, anc, "cgroup.subtree_control"))
		for _, c := range []string{"cpu", "memory", "pids", "cpuset"} {
			if !has(got, c) {
				t.Errorf("%s/cgroup.subtree_control = %v, missing %s", anc, got, c)
			}
		}
	}

	if err := d.Update(pod, &Resources{CPUQuota: ptr(int64(-1)), CPUPeriod: ptr(uint64(100000)), Memory: ptr(int64(-1)), PidsLimit: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"cpu.max": "max 100000", "memory.max": "max", "pids.max": "max"} {
		if got := readFile(t, dir, file); got != want {
			t.Errorf("after update %s = %q, want %q", file, got, want)
		}
	}

	// Counters as the kernel would present them.
	for file, body := range map[string]string{
		"cpu.stat":       "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
		"memory.current": "10485760\n",
		"memory.stat":    "anon 4194304\nfile 6291456\ninactive_file 2097152\npgfault 77\npgmajfault 3\n",
		"memory.events":  "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n",
		"pids.current":   "5\n",
		"memory.max":     "134217728\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := d.Stats(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUUsageNanos: 2500000, MemoryUsage: 10 << 20, MemoryWorkingSet: 8 << 20, MemoryRSS: 4 << 20,
		PageFaults: 77, MajorPageFaults: 3, MemoryLimit: 128 << 20, OOMKills: 2, Pids: 5}
	if *st != want {
		t.Errorf("Stats = %+v, want %+v", *st, want)
	}
	if kids, err := d.Children(Name{"kubepods", "burstable"}); err != nil || len(kids) != 1 || kids[0] != "kubepods-burstable-pod_1.slice" {
		t.Errorf("Children = %v, %v", kids, err)
	}

	if err := d.Destroy(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if d.Exists(pod) {
		t.Error("cgroup still exists after Destroy")
	}
	if !d.Exists(Name{"kubepods", "burstable"}) {
		t.Error("Destroy removed the parent")
	}
}

// TestV2ContainerControllers: a driver for container cgroups delegates
// only the controllers it was asked for, and turns a memory+swap limit
// into memory.swap.max.
func TestV2ContainerControllers(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := newV2(Config{MountRoot: root, Naming: NamingCgroupfs, Controllers: []string{"pids"}, Clock: clock.RealClock{}}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := ParseCgroupfs("/pod/ctr")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctr, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "pod", "ctr")
	if got := readFile(t, root, "pod", "cgroup.subtree_control"); got != "cpu memory pids" {
		t.Errorf("pod subtree_control = %q, want cpu memory pids", got)
	}
	if dirs := d.Dirs(ctr); len(dirs) != 1 || dirs[0] != (Dir{Path: dir, Mount: root}) || d.Dir("memory", ctr) != dir {
		t.Errorf("Dirs = %+v, Dir(memory) = %s; want the one directory %s", dirs, d.Dir("memory", ctr), dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Update(ctr, &Resources{Memory: ptr(int64(64 << 20)), MemorySwap: ptr(int64(64 << 20))}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dir, "memory.swap.max"); got != "0" {
		t.Errorf("memory.swap.max = %q, want 0 (memory+swap equal to memory)", got)
	}
	if err := d.Kill(nil); err == nil {
		t.Error("Kill of the root cgroup was not refused")
	}
}

func TestSharesToWeight(t *testing.T) {
	for _, tc := range []struct{ shares, want uint64 }{
		{0, 0}, {1, 1}, {2, 1}, {1024, 39}, {2048, 79}, {3072, 118}, {262144, 10000}, {102, 4},
	} {
		if got := SharesToWeight(tc.shares); got != tc.want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", tc.shares, got, tc.want)
		}
	}
}

// An ancestor that exists already (made by another driver that delegated
// fewer controllers, or by systemd) is delegated to as well, from the root
// down: the kernel refuses "+cpuset" in a cgroup whose parent does not
// delegate cpuset (seen on a real v2 host: ENOENT on the cgroup root's
// subtree_control, the agent could not start).
func TestV2DelegatesThroughExistingAncestors(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "minilet"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := newV2(Config{MountRoot: root, Naming: NamingCgroupfs, Controllers: DefaultControllers, Clock: clock.RealClock{}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(Name{"minilet", "kubepods"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, anc := range []string{root, filepath.Join(root, "minilet")} {
		got := strings.Fields(readFile(t, anc, "cgroup.subtree_control"))
		for _, c := range []string{"cpu", "memory", "pids", "cpuset"} {
			if !has(got, c) {
				t.Errorf("%s/cgroup.subtree_control = %v, missing %s", anc, got, c)
			}
		}
	}
}
