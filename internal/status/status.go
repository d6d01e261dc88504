// Package status turns what the runtime reports about a pod into the
// v1.PodStatus users see: phase, conditions, container statuses, IPs and
// QoS class, by the kubelet's rules. Everything here is pure: the caller
// passes the pod, the runtime's view, the previous status and "now".
package status

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// ProbeStatus lets the prober fill in the ready and started fields of
// container statuses. The kubelet's prober manager has the same method.
type ProbeStatus interface {
	UpdatePodStatus(pod *v1.Pod, s *v1.PodStatus)
}

// Container waiting reasons the kubelet uses when it has nothing better.
const (
	ReasonContainerCreating = "ContainerCreating"
	ReasonPodInitializing   = "PodInitializing"
)

// Generator holds what stays the same from one status to the next.
type Generator struct {
	// HostIP is the node's IP, reported as status.hostIP. Default: the
	// previous status's hostIP.
	HostIP string
	// Probes sets ready and started. When nil, a running container is
	// ready and started (there is no prober to say otherwise).
	Probes ProbeStatus
}

// Generate computes the pod's status. rs may be nil (the runtime knows
// nothing of the pod yet), prev may be nil (first sync), waiting may be
// nil. A pod whose previous phase was terminal (Succeeded or Failed) keeps
// that phase, as the kubelet never leaves a terminal phase.
func (g Generator) Generate(pod *v1.Pod, rs *container.PodStatus, prev *v1.PodStatus, waiting map[string]container.Waiting, now time.Time) v1.PodStatus {
	if prev == nil {
		prev = &v1.PodStatus{}
	}
	s := v1.PodStatus{QOSClass: QOSClass(pod)}
	hasInit := len(pod.Spec.InitContainers) > 0
	s.InitContainerStatuses = g.containerStatuses(pod.Spec.InitContainers, rs, prev.InitContainerStatuses, waiting, true, hasInit)
	s.ContainerStatuses = g.containerStatuses(pod.Spec.Containers, rs, prev.ContainerStatuses, waiting, false, hasInit)
	s.EphemeralContainerStatuses = g.containerStatuses(podspec.EphemeralContainers(pod), rs, prev.EphemeralContainerStatuses, waiting, false, hasInit)
	sort.Slice(s.ContainerStatuses, func(i, j int) bool { return s.ContainerStatuses[i].Name < s.ContainerStatuses[j].Name })
	capMessages(pod, &s)
	if g.Probes != nil {
		g.Probes.UpdatePodStatus(pod, &s)
	}

	s.Phase = Phase(pod, s.InitContainerStatuses, s.ContainerStatuses)
	if prev.Phase == v1.PodSucceeded || prev.Phase == v1.PodFailed {
		s.Phase = prev.Phase
		s.Reason, s.Message = prev.Reason, prev.Message
	}

	s.HostIP = g.HostIP
	if s.HostIP == "" {
		s.HostIP = prev.HostIP
	}
	if s.HostIP != "" {
		s.HostIPs = []v1.HostIP{{IP: s.HostIP}}
	}
	s.PodIP = sandboxIP(rs)
	if s.PodIP == "" {
		s.PodIP = prev.PodIP
	}
	if s.PodIP == "" && pod.Spec.HostNetwork {
		s.PodIP = s.HostIP
	}
	if s.PodIP != "" {
		s.PodIPs = []v1.PodIP{{IP: s.PodIP}}
	}
	s.StartTime = prev.StartTime
	if s.StartTime == nil {
		t := metav1.NewTime(now)
		s.StartTime = &t
	}
	s.Conditions = conditions(pod, rs, &s, prev.Conditions, now)
	return s
}

// Failed is the status of a pod that admission rejected: phase Failed with
// the reason (e.g. OutOfcpu, UnexpectedAdmissionError) and the kubelet's
// "Pod was rejected: " message.
func Failed(pod *v1.Pod, reason, message string, now time.Time) v1.PodStatus {
	t := metav1.NewTime(now)
	return v1.PodStatus{
		Phase:    v1.PodFailed,
		Reason:   reason,
		Message:  "Pod was rejected: " + message,
		QOSClass: QOSClass(pod),
		Conditions: []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: t},
		},
	}
}

func sandboxIP(rs *container.PodStatus) string {
	if rs == nil {
		return ""
	}
	var newest *container.SandboxStatus
	for _, sb := range rs.Sandboxes {
		if newest == nil || sb.CreatedAt.After(newest.CreatedAt) {
			newest = sb
		}
	}
	if newest == nil {
		return ""
	}
	return newest.IP
}
