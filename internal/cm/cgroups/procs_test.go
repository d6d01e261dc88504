package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestV1ContainerCgroup uses a driver as the embedded runtime does for its
// containers (no cpuset), and the directory-level helpers as the container
// monitor does, against the machine's real cgroup v1 hierarchies.
func TestV1ContainerCgroup(t *testing.T) {
	requireV1(t)
	d, err := New(Config{Controllers: []string{"pids"}})
	if err != nil {
		t.Fatal(err)
	}
	ctr := testRoot(t, d).Child("ctr")
	if err := d.Create(ctr, nil); err != nil {
		t.Fatal(err)
	}
	rel := d.Path(ctr)
	var ctrls []string
	for _, dir := range d.Dirs(ctr) {
		if dir.Path != filepath.Join(dir.Mount, rel) {
			t.Errorf("Dir %+v: path is not %s under its mount", dir, rel)
		}
		ctrls = append(ctrls, dir.Controller)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids"} {
		if !slices.Contains(ctrls, c) {
			t.Errorf("Dirs controllers %v: missing %s", ctrls, c)
		}
	}
	if _, err := os.Stat(filepath.Join(DefaultMountRoot, "cpuset", rel)); !os.IsNotExist(err) {
		t.Errorf("container cgroup made in the cpuset hierarchy (%v)", err)
	}

	// Raising and lowering memory with a memory+swap limit keeps the
	// kernel's order (memsw >= limit) either way.
	mem := d.Dir("memory", ctr)
	memsw := fileExists(filepath.Join(mem, "memory.memsw.limit_in_bytes"))
	for _, limit := range []int64{64 << 20, 256 << 20, 32 << 20} {
		if err := d.Update(ctr, &Resources{Memory: ptr(limit), MemorySwap: ptr(limit)}); err != nil {
			t.Fatalf("memory %d: %v", limit, err)
		}
		want := strconv.FormatInt(limit, 10)
		if got := strings.TrimSpace(readFile(t, mem, "memory.limit_in_bytes")); got != want {
			t.Errorf("memory.limit_in_bytes = %s, want %s", got, want)
		}
		if got := strings.TrimSpace(readFile(t, mem, "memory.memsw.limit_in_bytes")); memsw && got != want {
			t.Errorf("memory.memsw.limit_in_bytes = %s, want %s", got, want)
		}
	}
	if n := OOMCount(mem, false); n != 0 {
		t.Errorf("OOMCount of a fresh cgroup = %d, want 0", n)
	}

	// A process joined through the directories is found there, and
	// KillDir ends it.
	w := startWorkload(t, "spin")
	for _, dir := range d.Dirs(ctr) {
		if err := JoinDir(dir.Path, w.cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	if pids, err := d.Pids(ctr); err != nil || !slices.Equal(pids, []int{w.cmd.Process.Pid}) {
		t.Fatalf("Pids = %v, %v; want [%d]", pids, err, w.cmd.Process.Pid)
	}
	if err := KillDir(d.Dir("pids", ctr)); err != nil {
		t.Fatal(err)
	}
	checkKilled(t, w)

	w = startWorkload(t, "spin")
	if err := d.Join(ctr, w.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := d.Kill(ctr); err != nil {
		t.Fatal(err)
	}
	checkKilled(t, w)
}

func TestSelf(t *testing.T) {
	requireV1(t)
	for _, c := range []string{"cpu", "memory"} {
		rel, ok := Self(c)
		if !ok {
			t.Fatalf("Self(%s): not found", c)
		}
		procs := readFile(t, DefaultMountRoot, c, rel, "cgroup.procs")
		if !slices.Contains(strings.Fields(procs), strconv.Itoa(os.Getpid())) {
			t.Errorf("Self(%s) = %s, whose cgroup.procs does not list this process", c, rel)
		}
	}
	if _, ok := Self("no-such-controller"); ok {
		t.Error("Self found a controller that does not exist")
	}
}

func checkKilled(t *testing.T, w *workload) {
	t.Helper()
	var ee *exec.ExitError
	if err := w.wait(t); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("process ended with %v, want SIGKILL", err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
