package eviction

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

func TestHostStatsMeasuresTheMachine(t *testing.T) {
	h, err := NewHostStats(HostStatsConfig{RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := h.NodeObservations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalImageFsAvailable, SignalPIDAvailable} {
		o, ok := obs[sig]
		if !ok || o.Capacity <= 0 || o.Available < 0 || o.Available > o.Capacity {
			t.Errorf("%s = %+v (present %v)", sig, o, ok)
		}
	}
	if obs[SignalNodeFsAvailable] != obs[SignalImageFsAvailable] {
		t.Errorf("without an image fs path both filesystems are the root dir's: %+v vs %+v",
			obs[SignalNodeFsAvailable], obs[SignalImageFsAvailable])
	}
	if _, err := NewHostStats(HostStatsConfig{}); err == nil {
		t.Error("NewHostStats accepted no root dir")
	}
}

func TestHostStatsMemoryFallsBackToMeminfo(t *testing.T) {
	proc := t.TempDir()
	meminfo := "MemTotal:       1000000 kB\nMemFree:         200000 kB\nInactive(file):  300000 kB\n"
	if err := os.WriteFile(filepath.Join(proc, "meminfo"), []byte(meminfo), 0o600); err != nil {
		t.Fatal(err)
	}
	h, _ := NewHostStats(HostStatsConfig{RootDir: t.TempDir(), ProcDir: proc, MemoryCgroup: filepath.Join(proc, "no-cgroup")})
	o, err := h.memory()
	if err != nil {
		t.Fatal(err)
	}
	// working set = (total - free) - inactive file = 500000 kB.
	if o.Capacity != 1000000*1024 || o.Available != 500000*1024 {
		t.Fatalf("memory = %+v", o)
	}
}

// TestDiskPressureOnARealFilesystem runs the manager over a 16 MiB tmpfs
// made by the test as the node filesystem. Files stand for what pods
// wrote and for dead containers' leftovers; the reclaimer deletes the
// latter and KillPod deletes the evicted pod's files. The disk figures
// are the kernel's.
func TestDiskPressureOnARealFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "nodefs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	const mib = 1 << 20
	write := func(name string, mbs int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte{1}, mbs*mib), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// 15 of 16 MiB used: under 10% available.
	write("dead/c1", 2)
	write("pods/big/data", 8)
	write("pods/small/data", 5)

	pods := []*v1.Pod{mkPod("big", 0, ""), mkPod("small", 0, "")}
	podUsage := func(ctx context.Context, ps []*v1.Pod) (map[types.UID]PodUsage, error) {
		out := map[types.UID]PodUsage{}
		for _, p := range ps {
			fi, err := os.Stat(filepath.Join(dir, "pods", p.Name, "data"))
			if err == nil {
				out[p.UID] = PodUsage{Disk: fi.Size(), Inodes: 1}
			}
		}
		return out, nil
	}
	stats, err := NewHostStats(HostStatsConfig{RootDir: dir, PodUsage: podUsage})
	if err != nil {
		t.Fatal(err)
	}
	var evicted []string
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := New(Config{Hard: defaultHard()}, Deps{
		Stats: stats,
		Reclaimer: ReclaimFuncs{Containers: func(context.Context) error {
			return os.RemoveAll(filepath.Join(dir, "dead"))
		}},
		ActivePods: func() []*v1.Pod { return pods },
		KillPod: func(p *v1.Pod, st v1.PodStatus, grace int64) error {
			evicted = append(evicted, p.Name)
			pods = slices.DeleteFunc(pods, func(q *v1.Pod) bool { return q.UID == p.UID })
			return os.RemoveAll(filepath.Join(dir, "pods", p.Name))
		},
		Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if _, disk, _ := m.Conditions(); !disk {
		t.Fatal("no DiskPressure with 15 of 16 MiB used")
	}
	// Deleting the dead container's 2 MiB leaves 3 of 16 MiB free, above
	// both nodefs.available<10% and imagefs.available<15% (the same
	// filesystem here), so reclaim alone relieves the pressure.
	if len(evicted) != 0 {
		t.Fatalf("evicted %v although reclaim freed enough", evicted)
	}
	if _, err := os.Stat(filepath.Join(dir, "dead")); !os.IsNotExist(err) {
		t.Fatalf("dead container files not reclaimed: %v", err)
	}

	// The pods write more: nothing is left to reclaim, so the pod using
	// the most disk is evicted and the real free space comes back.
	write("pods/small/more", 2)
	clk.Step(10 * time.Second)
	if err := m.synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(evicted, []string{"big"}) {
		t.Fatalf("evicted %v, want the pod using the most disk", evicted)
	}
	obs, err := stats.NodeObservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := obs[SignalNodeFsAvailable]; o.Available < o.Capacity/2 {
		t.Fatalf("after eviction only %d of %d bytes free", o.Available, o.Capacity)
	}
	// The condition stays for the transition period, then clears.
	clk.Step(5 * time.Minute)
	if err := m.synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if _, disk, _ := m.Conditions(); disk {
		t.Fatal("DiskPressure outlived the pressure by more than the transition period")
	}
}

func TestDedicatedImageFs(t *testing.T) {
	root := t.TempDir()
	same, _ := NewHostStats(HostStatsConfig{RootDir: root, ImageFsPath: filepath.Join(root)})
	if same.DedicatedImageFs() {
		t.Fatal("one directory reported as two filesystems")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	img := filepath.Join(t.TempDir(), "imagefs")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", img, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(img, unix.MNT_DETACH) })
	other, _ := NewHostStats(HostStatsConfig{RootDir: root, ImageFsPath: img})
	if !other.DedicatedImageFs() {
		t.Fatal("a tmpfs image fs not reported as dedicated")
	}
	obs, err := other.NodeObservations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if o := obs[SignalImageFsAvailable]; o.Capacity != 1<<20 {
		t.Fatalf("imagefs.available = %+v, want the 1 MiB tmpfs", o)
	}
}
