package logs

import (
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
)

// Locator finds container log files from the pods' statuses, in the
// kubelet's log layout under Root.
type Locator struct {
	// Pods lists the pods with their statuses.
	Pods func() []v1.Pod
	// Root is the log root (<root-dir>/logs).
	Root string
}

// ContainerLogPath returns the log file of a container's current attempt,
// or with previous of the one before its last restart. An unknown pod or
// container, or one that has not started, is errdefs.ErrNotFound.
func (l Locator) ContainerLogPath(namespace, pod, containerName string, previous bool) (string, error) {
	p, ok := l.find(namespace, pod)
	if !ok {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, pod, errdefs.ErrNotFound)
	}
	cs := containerStatus(p, containerName)
	if cs == nil {
		return "", fmt.Errorf("container %q in pod %s/%s: %w", containerName, namespace, pod, errdefs.ErrNotFound)
	}
	attempt := cs.RestartCount
	if previous {
		if cs.LastTerminationState.Terminated == nil {
			return "", fmt.Errorf("previous terminated container %q in pod %s/%s: %w", containerName, namespace, pod, errdefs.ErrNotFound)
		}
		attempt--
	} else if cs.ContainerID == "" {
		return "", fmt.Errorf("container %q in pod %s/%s has not started yet: %w", containerName, namespace, pod, errdefs.ErrNotFound)
	}
	dir := container.PodLogDir(l.Root, p.Namespace, p.Name, string(p.UID))
	return filepath.Join(dir, container.ContainerLogFile(containerName, int(attempt))), nil
}

// ContainerRunning reports whether a container runs now (a followed log
// ends when it stops).
func (l Locator) ContainerRunning(namespace, pod, containerName string) bool {
	p, ok := l.find(namespace, pod)
	if !ok {
		return false
	}
	cs := containerStatus(p, containerName)
	return cs != nil && cs.State.Running != nil
}

func (l Locator) find(namespace, name string) (v1.Pod, bool) {
	for _, p := range l.Pods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return v1.Pod{}, false
}

func containerStatus(p v1.Pod, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
