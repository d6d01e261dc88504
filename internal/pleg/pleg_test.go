package pleg

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
)

type listing struct{ pods []*container.Pod }

func (l *listing) GetPods(context.Context) ([]*container.Pod, error) { return l.pods, nil }

func drain(p *PLEG) []Event {
	var out []Event
	for {
		select {
		case e := <-p.Events():
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestRelistReportsStartsDeathsAndRemovals(t *testing.T) {
	l := &listing{}
	p := New(Config{Lister: l})
	sb := &container.SandboxStatus{ID: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY}
	steps := []struct {
		name       string
		containers []*container.ContainerStatus
		sandboxes  []*container.SandboxStatus
		want       []Event
	}{
		{"created is not started", []*container.ContainerStatus{{ID: container.ID{Type: "test", ID: "c1"}, State: container.StateCreated}}, []*container.SandboxStatus{sb}, nil},
		{"started", []*container.ContainerStatus{{ID: container.ID{Type: "test", ID: "c1"}, State: container.StateRunning}}, []*container.SandboxStatus{sb}, []Event{{"p", ContainerStarted, "c1"}}},
		{"unchanged", []*container.ContainerStatus{{ID: container.ID{Type: "test", ID: "c1"}, State: container.StateRunning}}, []*container.SandboxStatus{sb}, nil},
		{"died", []*container.ContainerStatus{{ID: container.ID{Type: "test", ID: "c1"}, State: container.StateExited}}, []*container.SandboxStatus{sb}, []Event{{"p", ContainerDied, "c1"}}},
		{"removed and sandbox gone", nil, nil, []Event{{"p", ContainerRemoved, "c1"}, {"p", SandboxChanged, "s1"}}},
	}
	for _, s := range steps {
		l.pods = []*container.Pod{{UID: "p", Containers: s.containers, Sandboxes: s.sandboxes}}
		p.Relist(context.Background())
		got := drain(p)
		if len(got) != len(s.want) {
			t.Fatalf("%s: events = %v, want %v", s.name, got, s.want)
		}
		for i := range got {
			if got[i] != s.want[i] {
				t.Fatalf("%s: events = %v, want %v", s.name, got, s.want)
			}
		}
	}
}

func TestFirstRelistReportsExitedContainersSoTheirPodsSync(t *testing.T) {
	// After an agent restart, containers that died while it was away must
	// still reach the sync loop.
	l := &listing{pods: []*container.Pod{{UID: "p", Containers: []*container.ContainerStatus{{ID: container.ID{Type: "test", ID: "c1"}, State: container.StateExited}}}}}
	p := New(Config{Lister: l})
	p.Relist(context.Background())
	got := drain(p)
	if len(got) != 1 || got[0].Type != ContainerDied {
		t.Fatalf("events = %v, want one ContainerDied", got)
	}
}
