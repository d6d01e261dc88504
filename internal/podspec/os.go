package podspec

import (
	"runtime"

	v1 "k8s.io/api/core/v1"
)

// Reasons of the kubelet's OS admission checks.
const (
	ReasonPodOSNotSupported                  = "PodOSNotSupported"
	ReasonPodOSSelectorNodeLabelDoesNotMatch = "PodOSSelectorNodeLabelDoesNotMatch"
)

// AdmitOS refuses, as the kubelet does before any resource check, a pod
// for another operating system: by its kubernetes.io/os node selector or
// its spec.os.name.
func AdmitOS(pod *v1.Pod) (ok bool, reason, message string) {
	if os, set := pod.Spec.NodeSelector[v1.LabelOSStable]; set && os != runtime.GOOS {
		return false, ReasonPodOSSelectorNodeLabelDoesNotMatch, "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != runtime.GOOS {
		return false, ReasonPodOSNotSupported, "Failed to admit pod as the OS field doesn't match node OS"
	}
	return true, "", ""
}
