package cli

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)

func TestAge(t *testing.T) {
	for _, tt := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"},
		{59 * time.Second, "59s"},
		{2*time.Minute + 5*time.Second, "2m5s"},
		{11 * time.Minute, "11m"},
		{3*time.Hour + 20*time.Minute, "3h20m"},
		{9 * time.Hour, "9h"},
		{50 * time.Hour, "2d2h"},
		{-5 * time.Second, "0s"}, // agent clock ahead of ours
	} {
		if got := age(now.Add(-tt.ago), now); got != tt.want {
			t.Errorf("age(%v ago) = %q, want %q", tt.ago, got, tt.want)
		}
	}
	if got := age(time.Time{}, now); got != "<unknown>" {
		t.Errorf("zero time: %q", got)
	}
}

func running(name string, ready bool, restarts int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, Ready: ready, RestartCount: restarts,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-time.Hour))}}}
}

func waiting(name, reason string, restarts int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, RestartCount: restarts,
		State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}}
}

func terminated(name, reason string, code, signal int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: reason, ExitCode: code, Signal: signal}}}
}

func withLastExit(s v1.ContainerStatus, ago time.Duration) v1.ContainerStatus {
	s.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: metav1.NewTime(now.Add(-ago))}
	return s
}

func mkPod(phase v1.PodPhase, inits, ctrs []string) *v1.Pod {
	p := &v1.Pod{Status: v1.PodStatus{Phase: phase}}
	for _, n := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n})
	}
	for _, n := range ctrs {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n})
	}
	return p
}

func TestSummarizePod(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	yes := true
	tests := []struct {
		name string
		pod  func() *v1.Pod
		want podRow
	}{
		{"running and ready", func() *v1.Pod {
			p := mkPod(v1.PodRunning, nil, []string{"a", "b"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{running("a", true, 0), running("b", true, 0)}
			return p
		}, podRow{"2/2", "Running", "0"}},
		{"running, one not ready", func() *v1.Pod {
			p := mkPod(v1.PodRunning, nil, []string{"a", "b"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{running("a", true, 0), running("b", false, 0)}
			return p
		}, podRow{"1/2", "Running", "0"}},
		{"pending with no statuses", func() *v1.Pod { return mkPod(v1.PodPending, nil, []string{"a"}) },
			podRow{"0/1", "Pending", "0"}},
		{"container creating", func() *v1.Pod {
			p := mkPod(v1.PodPending, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{waiting("a", "ContainerCreating", 0)}
			return p
		}, podRow{"0/1", "ContainerCreating", "0"}},
		{"crash loop with restart age", func() *v1.Pod {
			p := mkPod(v1.PodRunning, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{withLastExit(waiting("a", "CrashLoopBackOff", 3), 12*time.Second)}
			return p
		}, podRow{"0/1", "CrashLoopBackOff", "3 (12s ago)"}},
		{"completed", func() *v1.Pod {
			p := mkPod(v1.PodSucceeded, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{terminated("a", "Completed", 0, 0)}
			return p
		}, podRow{"0/1", "Completed", "0"}},
		{"error", func() *v1.Pod {
			p := mkPod(v1.PodFailed, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{terminated("a", "Error", 2, 0)}
			return p
		}, podRow{"0/1", "Error", "0"}},
		{"oom killed", func() *v1.Pod {
			p := mkPod(v1.PodFailed, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{terminated("a", "OOMKilled", 137, 0)}
			return p
		}, podRow{"0/1", "OOMKilled", "0"}},
		{"exit code without reason", func() *v1.Pod {
			p := mkPod(v1.PodFailed, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{terminated("a", "", 3, 0)}
			return p
		}, podRow{"0/1", "ExitCode:3", "0"}},
		{"signal without reason", func() *v1.Pod {
			p := mkPod(v1.PodFailed, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{terminated("a", "", 0, 9)}
			return p
		}, podRow{"0/1", "Signal:9", "0"}},
		{"first container's reason wins", func() *v1.Pod {
			p := mkPod(v1.PodRunning, nil, []string{"a", "b"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{waiting("a", "ErrImagePull", 0), waiting("b", "CrashLoopBackOff", 1)}
			return p
		}, podRow{"0/2", "ErrImagePull", "1"}},
		{"completed sidecar-less container while another runs", func() *v1.Pod {
			p := mkPod(v1.PodRunning, nil, []string{"a", "b"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{terminated("a", "Completed", 0, 0), running("b", true, 0)}
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}
			return p
		}, podRow{"1/2", "NotReady", "0"}},
		{"init 0/2 while first init runs", func() *v1.Pod {
			p := mkPod(v1.PodPending, []string{"i1", "i2"}, []string{"a"})
			p.Status.InitContainerStatuses = []v1.ContainerStatus{running("i1", false, 0), waiting("i2", "PodInitializing", 0)}
			p.Status.ContainerStatuses = []v1.ContainerStatus{waiting("a", "PodInitializing", 0)}
			return p
		}, podRow{"0/1", "Init:0/2", "0"}},
		{"init 1/2 after first succeeded", func() *v1.Pod {
			p := mkPod(v1.PodPending, []string{"i1", "i2"}, []string{"a"})
			p.Status.InitContainerStatuses = []v1.ContainerStatus{terminated("i1", "Completed", 0, 0), running("i2", false, 0)}
			return p
		}, podRow{"0/1", "Init:1/2", "0"}},
		{"init crash loop", func() *v1.Pod {
			p := mkPod(v1.PodPending, []string{"i1"}, []string{"a"})
			p.Status.InitContainerStatuses = []v1.ContainerStatus{withLastExit(waiting("i1", "CrashLoopBackOff", 4), 90*time.Second)}
			return p
		}, podRow{"0/1", "Init:CrashLoopBackOff", "4 (90s ago)"}},
		{"init failed with exit code", func() *v1.Pod {
			p := mkPod(v1.PodFailed, []string{"i1"}, []string{"a"})
			p.Status.InitContainerStatuses = []v1.ContainerStatus{terminated("i1", "", 1, 0)}
			return p
		}, podRow{"0/1", "Init:ExitCode:1", "0"}},
		{"init failed with reason", func() *v1.Pod {
			p := mkPod(v1.PodFailed, []string{"i1"}, []string{"a"})
			p.Status.InitContainerStatuses = []v1.ContainerStatus{terminated("i1", "Error", 1, 0)}
			return p
		}, podRow{"0/1", "Init:Error", "0"}},
		{"started sidecar counts as ready and its restarts count", func() *v1.Pod {
			p := mkPod(v1.PodRunning, []string{"side"}, []string{"a"})
			p.Spec.InitContainers[0].RestartPolicy = &always
			s := running("side", true, 2)
			s.Started = &yes
			p.Status.InitContainerStatuses = []v1.ContainerStatus{s}
			p.Status.ContainerStatuses = []v1.ContainerStatus{running("a", true, 1)}
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodInitialized, Status: v1.ConditionTrue}}
			return p
		}, podRow{"2/2", "Running", "3"}},
		{"terminating", func() *v1.Pod {
			p := mkPod(v1.PodRunning, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{running("a", true, 0)}
			ts := metav1.NewTime(now)
			p.DeletionTimestamp = &ts
			return p
		}, podRow{"1/1", "Terminating", "0"}},
		{"deleted pod that already completed keeps its status", func() *v1.Pod {
			p := mkPod(v1.PodSucceeded, nil, []string{"a"})
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "a",
				State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed"}}}}
			ts := metav1.NewTime(now)
			p.DeletionTimestamp = &ts
			return p
		}, podRow{"0/1", "Completed", "0"}},
		{"pod reason overrides phase", func() *v1.Pod {
			p := mkPod(v1.PodFailed, nil, []string{"a"})
			p.Status.Reason = "Evicted"
			return p
		}, podRow{"0/1", "Evicted", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarizePod(tt.pod(), now); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestQOSClass(t *testing.T) {
	res := func(req, lim string) v1.ResourceRequirements {
		r := v1.ResourceRequirements{}
		if req != "" {
			r.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(req), v1.ResourceMemory: resource.MustParse("64Mi")}
		}
		if lim != "" {
			r.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse(lim), v1.ResourceMemory: resource.MustParse("64Mi")}
		}
		return r
	}
	for _, tt := range []struct {
		r    v1.ResourceRequirements
		want v1.PodQOSClass
	}{
		{v1.ResourceRequirements{}, v1.PodQOSBestEffort},
		{res("100m", "100m"), v1.PodQOSGuaranteed},
		{res("", "100m"), v1.PodQOSGuaranteed}, // requests default to limits
		{res("100m", "200m"), v1.PodQOSBurstable},
		{res("100m", ""), v1.PodQOSBurstable},
	} {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Resources: tt.r}}}}
		if got := qosClass(p); got != tt.want {
			t.Errorf("%+v: got %s, want %s", tt.r, got, tt.want)
		}
	}
	p := &v1.Pod{Status: v1.PodStatus{QOSClass: v1.PodQOSGuaranteed}}
	if qosClass(p) != v1.PodQOSGuaranteed {
		t.Error("status QOSClass not preferred")
	}
}
