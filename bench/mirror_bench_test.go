package bench

// Mirror pods (issue 15): how soon the API server's mirror of a static pod
// follows what happened, seen through a pod watch as a user's client
// would. One static pod on a real kube-apiserver + etcd on loopback
// (skipped unless MINILET_CLUSTER=1); N is MINILET_MIRROR_N (default 20)
// samples of each:
//
//   - recreate: an admin deletes the mirror (client-go, default grace, as
//     `kubectl delete pod` does) → a new mirror (another UID, not being
//     deleted) exists. The kubelet takes about 1 s.
//   - update: the manifest gets a new label → a mirror with that label
//     (the new spec hash) shows phase Running.
//   - remove: the manifest is removed → the mirror is deleted (the static
//     pod is terminated first; its container exits on SIGTERM).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/minilet/minilet/internal/cluster/clustertest"
)

const mirrorAnnotation = "kubernetes.io/config.mirror"

func BenchmarkClusterMirror(b *testing.B) {
	requireRootB(b)
	clustertest.SkipUnlessEnabled(b)
	n := envInt("MINILET_MIRROR_N", 20)
	srv, a := clusterAgent(b, "mirror", clustertest.Options{})
	ctx := context.Background()
	pods := srv.Admin.CoreV1().Pods("default")
	w := nodePodWatch(b, srv, a.NodeName)
	name := a.Static("mirrored")
	manifest := func(rev int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: mirrored\n  namespace: default\n  labels: {rev: %q}\n"+
			"spec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: host\n    command: [sleep, '100000']\n", strconv.Itoa(rev))
	}
	// runningRev waits for the mirror of revision rev to show Running.
	runningRev := func(rev int) *v1.Pod {
		return waitMirror(b, w, name, func(e watch.Event, p *v1.Pod) bool {
			return e.Type != watch.Deleted && p.Labels["rev"] == strconv.Itoa(rev) && p.DeletionTimestamp == nil &&
				p.Status.Phase == v1.PodRunning
		})
	}
	b.Logf("load before: %s", loadavg())
	a.WriteManifest("mirrored.yaml", manifest(0))
	cur := runningRev(0)

	b.ResetTimer()
	var recreate, update, remove []time.Duration
	for range n {
		start := time.Now()
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(cur.UID))}); err != nil {
			b.Fatalf("deleting the mirror: %v", err)
		}
		old := cur.UID
		cur = waitMirror(b, w, name, func(e watch.Event, p *v1.Pod) bool {
			return e.Type != watch.Deleted && p.UID != old && p.DeletionTimestamp == nil
		})
		recreate = append(recreate, time.Since(start))
	}
	for i := 1; i <= n; i++ {
		start := time.Now()
		a.WriteManifest("mirrored.yaml", manifest(i))
		cur = runningRev(i)
		update = append(update, time.Since(start))
	}
	for i := n + 1; i <= 2*n; i++ {
		start := time.Now()
		a.RemoveManifest("mirrored.yaml")
		gone := cur.UID
		waitMirror(b, w, name, func(e watch.Event, p *v1.Pod) bool { return e.Type == watch.Deleted && p.UID == gone })
		remove = append(remove, time.Since(start))
		b.StopTimer()
		a.WriteManifest("mirrored.yaml", manifest(i))
		cur = runningRev(i)
		b.StartTimer()
	}
	b.StopTimer()
	for _, m := range []struct {
		what string
		lat  []time.Duration
	}{{"recreate", recreate}, {"update", update}, {"remove", remove}} {
		b.ReportMetric(ms(percentile(m.lat, 0.5)), m.what+"-p50-ms")
		b.ReportMetric(ms(percentile(m.lat, 0.99)), m.what+"-p99-ms")
		b.Logf("mirror %s: n=%d p50=%.0fms p99=%.0fms max=%.0fms", m.what, len(m.lat),
			ms(percentile(m.lat, 0.5)), ms(percentile(m.lat, 0.99)), ms(slices.Max(m.lat)))
	}
	b.Logf("load after: %s", loadavg())
}

// waitMirror reads w until the mirror pod name's event satisfies ok, for
// up to 150 s (longer than the agent's 60 s periodic resync, so that a
// slow path is measured rather than failed).
func waitMirror(b *testing.B, w watch.Interface, name string, ok func(watch.Event, *v1.Pod) bool) *v1.Pod {
	b.Helper()
	timeout := time.After(150 * time.Second)
	for {
		select {
		case e, open := <-w.ResultChan():
			if !open {
				b.Fatal("pod watch closed")
			}
			if e.Type == watch.Error {
				b.Fatalf("pod watch: %v", apierrors.FromObject(e.Object))
			}
			p, isPod := e.Object.(*v1.Pod)
			if isPod && p.Name == name && p.Annotations[mirrorAnnotation] != "" && ok(e, p) {
				return p
			}
		case <-timeout:
			b.Fatalf("mirror pod %s: no matching watch event within 150s", name)
		}
	}
}
