package kuberuntime

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/events/eventstest"
)

// objRecorder keeps the objects events were recorded on, besides the
// lines eventstest keeps.
type objRecorder struct {
	eventstest.Recorder
	mu   sync.Mutex
	objs []runtime.Object
}

func (r *objRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	r.objs = append(r.objs, obj)
	r.mu.Unlock()
	r.Recorder.Event(obj, eventtype, reason, message)
}

func (r *objRecorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.mu.Lock()
	r.objs = append(r.objs, obj)
	r.mu.Unlock()
	r.Recorder.Eventf(obj, eventtype, reason, format, args...)
}

// The embedded runtime marks lost state with the reason the manager
// looks for.
func TestStateLostReasonMatchesTheEmbeddedRuntime(t *testing.T) {
	if monitorproc.ReasonStateLost != ReasonContainerStateLost {
		t.Fatalf("embedded runtime reason %q, manager looks for %q", monitorproc.ReasonStateLost, ReasonContainerStateLost)
	}
}

// A container the runtime marks ContainerStateLost gives one Warning
// event on its pod, naming the container and carrying the runtime's word
// on what was lost and done, however often its status is read; a loss an
// earlier run already reported (exited before this run began) gives none.
func TestStateLostGivesOneWarningEvent(t *testing.T) {
	rec := &objRecorder{}
	since := time.Now()
	e := newEnv(t, func(c *Config) { c.Recorder = rec; c.StateLostSince = since })
	pod := mkPod(v1.RestartPolicyAlways, nil, "a", "b", "c")
	if res := e.sync(pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	ps := e.status(pod).ps
	ids := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		ids[n] = ps.FindContainer(n).ID.ID
	}
	const lostMsg = "the container's monitor (pid 7) was lost while the container (pid 8) still ran; it was killed"
	e.rt.Lock()
	// a: killed after its monitor was lost, in this run.
	fa := e.rt.Containers[ids["a"]]
	fa.State, fa.ExitCode, fa.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, 137, since.Add(time.Second).UnixNano()
	fa.Reason, fa.Message = ReasonContainerStateLost, lostMsg
	// b: re-adopted, still running.
	fb := e.rt.Containers[ids["b"]]
	fb.Reason, fb.Message = ReasonContainerStateLost, "the start record was lost; the running container was re-adopted"
	// c: lost in an earlier run, which reported it.
	fc := e.rt.Containers[ids["c"]]
	fc.State, fc.ExitCode, fc.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, 255, since.Add(-time.Minute).UnixNano()
	fc.Reason, fc.Message = ReasonContainerStateLost, "lost before"
	e.rt.Unlock()

	rec.mu.Lock()
	rec.objs = nil // the sync's own events
	rec.mu.Unlock()
	for range 3 {
		if _, err := e.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace); err != nil {
			t.Fatal(err)
		}
	}
	if n := rec.Count("Warning ContainerStateLost"); n != 2 {
		t.Fatalf("%d ContainerStateLost events, want 2 (a and b once each):\n%s", n, rec.String())
	}
	if !rec.Has("Warning ContainerStateLost Container a (" + ids["a"] + "): " + lostMsg) {
		t.Errorf("no event naming container a and what was lost:\n%s", rec.String())
	}
	if !rec.Has("Container b (" + ids["b"] + "): the start record was lost; the running container was re-adopted") {
		t.Errorf("no event for the re-adopted container b:\n%s", rec.String())
	}
	if rec.Has("lost before") {
		t.Errorf("a loss from before this run was reported again:\n%s", rec.String())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.objs) != 2 {
		t.Errorf("%d events recorded, want the 2 ContainerStateLost ones", len(rec.objs))
	}
	for _, o := range rec.objs {
		p, ok := o.(*v1.Pod)
		if !ok || p.Name != pod.Name || p.Namespace != pod.Namespace || p.UID != pod.UID {
			t.Errorf("event recorded on %#v, want the pod %s/%s (%s)", o, pod.Namespace, pod.Name, pod.UID)
		}
	}
}
