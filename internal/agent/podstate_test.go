package agent

import (
	"io"
	"log/slog"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testPod(uid, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "default",
		Annotations: map[string]string{sourceAnnotation: "file"}}}
}

func TestStoppedPhase(t *testing.T) {
	exited := func(code int32) v1.ContainerStatus {
		return v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	for _, tc := range []struct {
		name string
		cs   []v1.ContainerStatus
		want v1.PodPhase
	}{
		{"all exited 0", []v1.ContainerStatus{exited(0), exited(0)}, v1.PodSucceeded},
		{"one exited 143", []v1.ContainerStatus{exited(0), exited(143)}, v1.PodFailed},
		{"one never ran", []v1.ContainerStatus{exited(0), {}}, v1.PodFailed},
		{"no containers", nil, v1.PodFailed},
	} {
		if got := stoppedPhase(v1.PodStatus{ContainerStatuses: tc.cs}); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestForgottenPodStatusIsNotResurrected(t *testing.T) {
	s := newPodState()
	p := testPod("a", "web")
	s.setDesired(p)
	s.setStatus(p.UID, v1.PodStatus{Phase: v1.PodRunning})
	s.forget(p.UID)
	s.setStatus(p.UID, v1.PodStatus{Phase: v1.PodRunning}) // a late write from the worker
	if _, ok := s.status(p.UID); ok {
		t.Fatal("a late status write brought a forgotten pod back")
	}
	if len(s.list()) != 0 {
		t.Fatalf("list = %v, want empty", s.list())
	}
}

func TestLeavingPodsAreListedButNotActive(t *testing.T) {
	s := newPodState()
	web, job := testPod("a", "web"), testPod("b", "job")
	s.setDesired(web)
	s.setDesired(job)
	s.setStatus(job.UID, v1.PodStatus{Phase: v1.PodSucceeded})
	now := metav1.Now()
	leaving := web.DeepCopy()
	leaving.DeletionTimestamp = &now
	s.markLeaving(leaving)
	if got := s.active(); len(got) != 0 {
		t.Errorf("active = %v: neither a leaving nor a finished pod uses the node", got)
	}
	list := s.list()
	if len(list) != 2 || list[1].Name != "web" || list[1].DeletionTimestamp == nil {
		t.Errorf("list = %+v, want job and the terminating web", list)
	}
	if got := s.fromSource("file"); len(got) != 1 || got[0].Name != "job" {
		t.Errorf("fromSource = %v, want only the desired job", got)
	}
}

func TestSavedStatusSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first := newPodState()
	first.saved = newStatusFiles(dir, log)
	p := testPod("a", "web")
	first.setDesired(p)
	st := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "main", ContainerID: "minilet://c1", Ready: true}}}
	first.setStatus(p.UID, st)

	second := newPodState()
	second.saved = newStatusFiles(dir, log)
	got, ok := second.status(p.UID)
	if !ok || got.Phase != v1.PodRunning {
		t.Fatalf("restored status = %+v, %v", got, ok)
	}
	if !second.saved.wasReady("minilet://c1") || second.saved.wasReady("minilet://other") {
		t.Error("readiness of the saved container not restored exactly")
	}
	second.setDesired(p)
	second.forget(p.UID)
	third := newStatusFiles(dir, log)
	if _, ok := third.restoredStatus(p.UID); ok {
		t.Error("a forgotten pod's saved status is still on disk")
	}
}
