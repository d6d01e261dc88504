package lifecycle

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/podspec"
)

// mirrorOf is an API server mirror pod named like pod, carrying hash.
func mirrorOf(pod *v1.Pod, uid, hash string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		UID: types.UID(uid), Name: pod.Name, Namespace: pod.Namespace,
		Annotations: map[string]string{podspec.AnnotationConfigMirror: hash},
	}}
}

// TestMirrorOutOfStepSyncsStaticPod: the API server's snapshot shows the
// mirror pods; a running static pod whose mirror is gone, being deleted
// or of another version syncs at once (its sync brings the mirror back),
// once per state seen, and not for a mirror in step.
func TestMirrorOutOfStepSyncsStaticPod(t *testing.T) {
	h := newHarness(t, withSources(podspec.SourceFile, podspec.SourceAPI))
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	other := apiPod("u2", "api", "app")
	h.snapshot(podspec.SourceFile, pod)
	hash := podspec.MirrorHash(pod)
	deleting := mirrorOf(pod, "m2", hash)
	now := metav1.NewTime(h.clk.Now())
	deleting.DeletionTimestamp = &now

	for _, step := range []struct {
		name    string
		mirrors []*v1.Pod
		syncs   int
	}{
		{"in step", []*v1.Pod{mirrorOf(pod, "m1", hash)}, 0},
		{"deleted", nil, 1},
		{"still missing", nil, 0},
		{"recreated", []*v1.Pod{mirrorOf(pod, "m2", hash)}, 0},
		{"being deleted", []*v1.Pod{deleting}, 1},
		{"still being deleted", []*v1.Pod{deleting}, 0},
		{"another version", []*v1.Pod{mirrorOf(pod, "m3", "stale")}, 1},
		{"back in step", []*v1.Pod{mirrorOf(pod, "m4", hash)}, 0},
		{"deleted again", nil, 1},
	} {
		h.workers.calls = nil
		h.publisher.statuses = nil
		h.loop.HandleSnapshot(context.Background(), Snapshot{Source: podspec.SourceAPI, Pods: []*v1.Pod{other}, Mirrors: step.mirrors})
		h.workers.step(t)
		got := 0
		for _, c := range h.workers.calls {
			if c == "update web" {
				got++
			}
		}
		if got != step.syncs {
			t.Fatalf("%s: the static pod was asked to sync %d times, want %d (calls %v)", step.name, got, step.syncs, h.workers.calls)
		}
		if _, published := h.publisher.statuses["web"]; published != (step.syncs > 0) {
			t.Fatalf("%s: status published %v, want %v (the sync keeps the mirror in step)", step.name, published, step.syncs > 0)
		}
	}

	// Other sources know nothing of mirrors: their snapshots do not count
	// as "no mirror".
	h.workers.calls = nil
	h.snapshot(podspec.SourceFile, pod)
	if len(h.workers.calls) != 0 {
		t.Fatalf("a file snapshot with no change made calls %v", h.workers.calls)
	}

	// A static pod that is leaving is not synced for its mirror: its
	// mirror goes when it is gone.
	h.snapshot(podspec.SourceFile)
	h.workers.calls = nil
	h.loop.HandleSnapshot(context.Background(), Snapshot{Source: podspec.SourceAPI, Pods: []*v1.Pod{other}, Mirrors: []*v1.Pod{deleting}})
	if len(h.workers.calls) != 0 {
		t.Fatalf("a leaving static pod was synced for its mirror: %v", h.workers.calls)
	}
}
