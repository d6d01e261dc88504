package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/podspec"
)

type fakeVolumes struct {
	fail      error
	setups    int
	teardowns []types.UID
}

func (f *fakeVolumes) Setup(context.Context, *v1.Pod) error { f.setups++; return f.fail }
func (f *fakeVolumes) Teardown(uid types.UID) error {
	f.teardowns = append(f.teardowns, uid)
	return nil
}
func (f *fakeVolumes) CleanupOrphans(map[types.UID]bool) error { return nil }

func withVolumes(f *fakeVolumes) harnessOption {
	return func(h *harness, _ *LoopConfig) { h.volumes = f }
}

// Volumes come before containers: a pod whose volume cannot be set up
// starts nothing and says why (FailedMount), and starts once it can; a
// running pod keeps running when a later refresh fails; a finished pod's
// volumes are removed.
func TestVolumesBeforeContainers(t *testing.T) {
	vols := &fakeVolumes{fail: errors.New(`volume "cfg": configmap "settings": not found`)}
	h := newHarness(t, withVolumes(vols))
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}}
	h.snapshot(podspec.SourceFile, pod)
	if n := h.rt.attempts(pod.UID, "app"); n != 0 {
		t.Fatalf("container started %d times without its volumes", n)
	}
	if !h.rec.Has(`Warning FailedMount MountVolume.SetUp failed for volume "cfg": configmap "settings": not found`) {
		t.Errorf("no FailedMount event:\n%s", h.rec)
	}
	if got := h.waiting(pod, "app"); got != "ContainerCreating" {
		t.Errorf("container waiting %q, want ContainerCreating", got)
	}

	vols.fail = nil
	h.event(pod)
	if n := h.rt.attempts(pod.UID, "app"); n != 1 {
		t.Fatalf("container not started once the volume could be set up: %d", n)
	}
	vols.fail = errors.New("api server down")
	h.event(pod)
	if st := h.status(pod); st.Phase != v1.PodRunning || h.rt.attempts(pod.UID, "app") != 1 {
		t.Errorf("a failed refresh disturbed the running pod: phase %s, %d starts", st.Phase, h.rt.attempts(pod.UID, "app"))
	}

	h.snapshot(podspec.SourceFile) // manifest removed
	if len(vols.teardowns) != 1 || vols.teardowns[0] != pod.UID {
		t.Errorf("teardowns %v, want the pod's", vols.teardowns)
	}
	if strings.Count(h.rec.String(), "FailedMount") < 2 {
		t.Errorf("the failed refresh was not reported:\n%s", h.rec)
	}
}
