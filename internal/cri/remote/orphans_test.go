package remote_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/cri/remote/shimtest"
)

// listed is a runtime that lists the given sandbox IDs.
type listed []string

func (l listed) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	var out []*runtimeapi.PodSandbox
	for _, id := range l {
		out = append(out, &runtimeapi.PodSandbox{Id: id})
	}
	return out, nil
}

func (listed) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, nil
}

type nodeEvents struct {
	mu   sync.Mutex
	msgs []string
}

func (e *nodeEvents) NodeEventf(eventtype, reason, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.msgs = append(e.msgs, eventtype+" "+reason+": "+fmt.Sprintf(format, args...))
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a shim's socket lives under /run/containerd")
	}
}

// Real shims, no containerd: the reaper of the containerd at ours ends
// the shim that serves nothing ours lists, and leaves alone the one whose
// sandbox ours lists and a second private containerd's orphan.
func TestShimReaperEndsOnlyItsContainerdsOrphans(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	ours, theirs := filepath.Join(dir, "ours", "containerd.sock"), filepath.Join(dir, "theirs", "containerd.sock")
	orphan := shimtest.StartOrphan(t, ours, remote.ShimNamespace)
	serving := shimtest.StartOrphan(t, ours, remote.ShimNamespace)
	othersOrphan := shimtest.StartOrphan(t, theirs, remote.ShimNamespace)
	othersNamespace := shimtest.StartOrphan(t, ours, "moby")

	reg := prometheus.NewRegistry()
	events := &nodeEvents{}
	r, err := remote.NewShimReaper(remote.ShimReaperConfig{
		Endpoint: "unix://" + ours, Runtime: listed{serving.ID},
		MinAge: time.Nanosecond, Registerer: reg, Events: events,
	})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := r.Sweep(context.Background())
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if len(ended) != 1 || ended[0].ID != orphan.ID || ended[0].PID != orphan.PID {
		t.Errorf("Sweep ended %+v, want only the orphan %+v", ended, orphan)
	}
	if shimtest.Alive(orphan.PID, orphan.ID) {
		t.Errorf("the orphaned shim %s (pid %d) still runs", orphan.ID, orphan.PID)
	}
	for what, s := range map[string]shimtest.Orphan{
		"the shim of a sandbox the runtime lists": serving,
		"a second containerd's orphaned shim":     othersOrphan,
		"a shim of another namespace":             othersNamespace,
	} {
		if !shimtest.Alive(s.PID, s.ID) {
			t.Errorf("%s (pid %d) was ended", what, s.PID)
		}
	}
	if n := killedTotal(t, reg); n != 1 {
		t.Errorf("minilet_orphaned_shims_killed_total = %v, want 1", n)
	}
	if len(events.msgs) != 1 || !strings.Contains(events.msgs[0], remote.ReasonOrphanedShimKilled) || !strings.Contains(events.msgs[0], orphan.ID) {
		t.Errorf("node events %q, want one %s naming %s", events.msgs, remote.ReasonOrphanedShimKilled, orphan.ID)
	}
}

func TestShimReaperLeavesYoungShims(t *testing.T) {
	requireRoot(t)
	ours := filepath.Join(t.TempDir(), "containerd.sock")
	young := shimtest.StartOrphan(t, ours, remote.ShimNamespace)
	r, err := remote.NewShimReaper(remote.ShimReaperConfig{Endpoint: ours, Runtime: listed{}, MinAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if ended, err := r.Sweep(context.Background()); err != nil || len(ended) != 0 {
		t.Errorf("Sweep with MinAge 1h: ended %+v, %v; want nothing", ended, err)
	}
	if !shimtest.Alive(young.PID, young.ID) {
		t.Error("a shim younger than MinAge was ended: its sandbox may be in the making")
	}
}

func TestNewShimReaperRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]remote.ShimReaperConfig{
		"no runtime":       {Endpoint: "unix:///x.sock"},
		"tcp endpoint":     {Endpoint: "tcp://127.0.0.1:1", Runtime: listed{}},
		"negative min age": {Endpoint: "/x.sock", Runtime: listed{}, MinAge: -time.Second},
	} {
		if _, err := remote.NewShimReaper(cfg); err == nil {
			t.Errorf("%s: NewShimReaper accepted it", name)
		}
	}
}

// killedTotal is minilet_orphaned_shims_killed_total.
func killedTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "minilet_orphaned_shims_killed_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("minilet_orphaned_shims_killed_total is not registered")
	return 0
}
