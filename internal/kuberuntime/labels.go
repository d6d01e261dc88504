package kuberuntime

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/minilet/minilet/internal/container"
	v1 "k8s.io/api/core/v1"
)

// Labels and annotations the kubelet puts on sandboxes and containers;
// keeping its keys lets crictl and other tools recognise our pods.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationHash         = "io.kubernetes.container.hash"
	annotationRestartCount = "io.kubernetes.container.restartCount"
	annotationGracePeriod  = "io.kubernetes.pod.terminationGracePeriod"
	annotationTermMsgPath  = "io.kubernetes.container.terminationMessagePath"
	// The policy tells, once the container exited, whether its log
	// stands in for an empty termination message.
	annotationTermMsgPolicy = "io.kubernetes.container.terminationMessagePolicy"
	// The preStop handler and ports, recorded so that a container whose
	// pod spec is gone (an orphan left by an earlier run) still gets its
	// preStop hook when it is stopped, as the kubelet does.
	annotationPreStop = "io.kubernetes.container.preStopHandler"
	annotationPorts   = "io.kubernetes.container.ports"
)

func sandboxLabels(pod *v1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[labelPodName] = pod.Name
	l[labelPodNamespace] = pod.Namespace
	l[labelPodUID] = string(pod.UID)
	return l
}

func containerLabels(pod *v1.Pod, c *v1.Container) map[string]string {
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		labelPodUID:        string(pod.UID),
		labelContainerName: c.Name,
	}
}

func containerAnnotations(pod *v1.Pod, c *v1.Container, restartCount int) map[string]string {
	a := map[string]string{
		annotationHash:         strconv.FormatUint(container.Hash(c), 16),
		annotationRestartCount: strconv.Itoa(restartCount),
		annotationGracePeriod:  strconv.FormatInt(gracePeriodOf(pod), 10),
		annotationTermMsgPath:  c.TerminationMessagePath,
	}
	if c.TerminationMessagePolicy != "" {
		a[annotationTermMsgPolicy] = string(c.TerminationMessagePolicy)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if b, err := json.Marshal(c.Lifecycle.PreStop); err == nil {
			a[annotationPreStop] = string(b)
		}
		if len(c.Ports) > 0 {
			if b, err := json.Marshal(c.Ports); err == nil {
				a[annotationPorts] = string(b)
			}
		}
	}
	return a
}

// specFromAnnotations rebuilds the parts of a container spec that
// stopping it needs (name, preStop hook, ports) from what
// containerAnnotations recorded.
func specFromAnnotations(name string, annotations map[string]string) *v1.Container {
	c := &v1.Container{Name: name}
	var h v1.LifecycleHandler
	if err := json.Unmarshal([]byte(annotations[annotationPreStop]), &h); err == nil {
		c.Lifecycle = &v1.Lifecycle{PreStop: &h}
	}
	_ = json.Unmarshal([]byte(annotations[annotationPorts]), &c.Ports) // optional
	return c
}

// podLogDir is the sandbox's log directory: LogRoot/<ns>_<name>_<uid>.
func (m *Manager) podLogDir(namespace, name, uid string) string {
	return container.PodLogDir(m.cfg.LogRoot, namespace, name, uid)
}

// containerLogPath is the container's log path relative to the sandbox's
// log directory: <container>/<restartCount>.log.
func containerLogPath(name string, restartCount int) string {
	return container.ContainerLogFile(name, restartCount)
}

// podDesc names a pod the way the kubelet's messages do: name_ns(uid).
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

func gracePeriodOf(pod *v1.Pod) int64 {
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return v1.DefaultTerminationGracePeriodSeconds
}
