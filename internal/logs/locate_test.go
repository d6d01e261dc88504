package logs

import (
	"errors"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
)

// Logs are found for app, init and ephemeral containers (kubectl debug,
// then kubectl logs -c debugger), by the attempt the status names.
func TestLocatorFindsEveryKindOfContainer(t *testing.T) {
	pod := v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1"}}
	running := func(name string, restarts int32) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, RestartCount: restarts, ContainerID: "x://" + name,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{running("app", 2)}
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{running("init", 0)}
	pod.Status.EphemeralContainerStatuses = []v1.ContainerStatus{running("debugger", 0)}
	l := Locator{Pods: func() []v1.Pod { return []v1.Pod{pod} }, Root: "/logs"}
	dir := container.PodLogDir("/logs", "ns", "web", "u1")
	for name, want := range map[string]string{"app": "app/2.log", "init": "init/0.log", "debugger": "debugger/0.log"} {
		got, err := l.ContainerLogPath("ns", "web", name, false)
		if err != nil || got != filepath.Join(dir, want) {
			t.Errorf("%s: %q, %v; want %s", name, got, err, filepath.Join(dir, want))
		}
	}
	if _, err := l.ContainerLogPath("ns", "web", "nope", false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown container: %v, want not found", err)
	}
}
