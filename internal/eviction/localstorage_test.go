package eviction

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/volumes"
)

// withEmptyDir gives pod an emptyDir named "scratch" with a sizeLimit
// (and a medium).
func withEmptyDir(pod *v1.Pod, limit string, medium v1.StorageMedium) *v1.Pod {
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{
		EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium, SizeLimit: ptr.To(resource.MustParse(limit))},
	}})
	return pod
}

// An emptyDir on disk holding more than its sizeLimit gets its pod
// evicted at once, measured on real directories by the volumes package,
// with the kubelet's message and event and without waiting for node
// pressure; a pod within its limit, a Memory emptyDir and a critical pod
// stay, and an evicted pod is not evicted again while it stops.
func TestEmptyDirOverSizeLimitEvicts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Memory emptyDirs mount a tmpfs: needs root")
	}
	e := newEnv(t, Config{Hard: defaultHard()})
	vols, err := volumes.New(volumes.Config{PodsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.m.deps.Volumes = vols

	over := withEmptyDir(mkPod("over", 0, ""), "1Mi", "")
	within := withEmptyDir(mkPod("within", 0, ""), "4Mi", "")
	ram := withEmptyDir(mkPod("ram", 0, ""), "1Mi", v1.StorageMediumMemory)
	critical := withEmptyDir(mkPod("critical", systemCriticalPriority, ""), "1Mi", "")
	notSetUp := withEmptyDir(mkPod("not-set-up", 0, ""), "1Mi", "")
	e.pods = []*v1.Pod{over, within, ram, critical, notSetUp}
	for _, p := range []*v1.Pod{over, within, ram, critical} {
		if err := vols.Setup(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := vols.Teardown(p.UID); err != nil {
				t.Error(err)
			}
		})
	}
	fill := func(p *v1.Pod, size int) {
		t.Helper()
		dir, err := vols.Path(p, &p.Spec.Volumes[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data"), bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fill(over, 512<<10)
	fill(within, 2<<20)
	fill(ram, 512<<10)
	fill(critical, 2<<20)
	e.sync(t)
	if got := e.killedNames(); len(got) != 0 {
		t.Fatalf("evicted %v with every emptyDir within its limit", got)
	}

	fill(over, 2<<20)
	e.sync(t)
	if got := e.killedNames(); !slices.Equal(got, []string{"over"}) {
		t.Fatalf("evicted %v, want only the pod over its emptyDir limit", got)
	}
	k := e.kills[0]
	const wantMsg = `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `
	if k.status.Phase != v1.PodFailed || k.status.Reason != "Evicted" || k.status.Message != wantMsg || k.grace != 1 || len(k.status.Conditions) != 0 {
		t.Errorf("eviction status %+v grace %d", k.status, k.grace)
	}
	if !e.rec.Has("Warning Evicted " + wantMsg) {
		t.Errorf("no Evicted event; events:\n%s", e.rec)
	}
	if mem, disk, pid := e.m.Conditions(); mem || disk || pid {
		t.Errorf("conditions %v %v %v: a pod's own limit is no node pressure", mem, disk, pid)
	}

	e.sync(t) // still stopping
	if got := e.killedNames(); len(got) != 1 {
		t.Errorf("evicted again while it stops: %v", got)
	}
	e.remove("over")
	e.sync(t) // gone: forgotten
	e.mu.Lock()
	e.pods = append(e.pods, over) // back with the same UID (a static pod's manifest restored)
	e.mu.Unlock()
	e.sync(t)
	if got := e.killedNames(); !slices.Equal(got, []string{"over", "over"}) {
		t.Errorf("a pod back after it was gone is judged afresh: evictions %v", got)
	}
}
