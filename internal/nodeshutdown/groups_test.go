package nodeshutdown

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name string, prio int32, grace int64) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Priority = &prio
	if grace >= 0 {
		p.Spec.TerminationGracePeriodSeconds = &grace
	}
	return p
}

func names(g group) []string {
	var out []string
	for _, p := range g.pods {
		out = append(out, p.Name)
	}
	return out
}

// The kubelet's grouping: by default regular pods get the total minus the
// critical pods' period and stop first; with priority classes, each pod
// goes to the highest group not above its priority.
func TestGroups(t *testing.T) {
	pods := []*v1.Pod{pod("web", 0, 30), pod("batch", -10, 5), pod("dns", systemCriticalPriority, 30), pod("mid", 1000, 60)}

	g := groupPods(pods, periods(30*time.Second, 10*time.Second, nil))
	if len(g) != 2 || g[0].Period != 20*time.Second || g[1].Period != 10*time.Second {
		t.Fatalf("default periods: %+v", g)
	}
	if got := names(g[0]); len(got) != 3 || got[0] != "web" || got[1] != "batch" || got[2] != "mid" {
		t.Errorf("regular group = %v", got)
	}
	if got := names(g[1]); len(got) != 1 || got[0] != "dns" {
		t.Errorf("critical group = %v", got)
	}

	g = groupPods(pods, periods(0, 0, []PriorityPeriod{{100000, 5 * time.Second}, {0, 20 * time.Second}, {1000, 10 * time.Second}}))
	want := [][]string{{"web", "batch"}, {"mid"}, {"dns"}}
	for i, w := range want {
		got := names(g[i])
		if len(got) != len(w) {
			t.Fatalf("group %d (priority %d) = %v, want %v", i, g[i].Priority, got, w)
		}
		for j := range w {
			if got[j] != w[j] {
				t.Errorf("group %d = %v, want %v", i, got, w)
			}
		}
	}
}

func TestGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		own    int64
		period time.Duration
		want   int64
	}{{5, 20 * time.Second, 5}, {30, 20 * time.Second, 20}, {-1, 20 * time.Second, 20}, {0, 10 * time.Second, 0}} {
		if got := gracePeriod(pod("p", 0, tc.own), tc.period); got != tc.want {
			t.Errorf("own %d, period %s: %d, want %d", tc.own, tc.period, got, tc.want)
		}
	}
}
