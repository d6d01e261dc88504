package status

import (
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
)

// maxPodTerminationMessages is the kubelet's cap on the termination
// messages of one pod: 12 KiB, shared evenly by its containers (init
// containers counted), each message cut to its share.
const maxPodTerminationMessages = 12 * 1024

// capMessages cuts every container's termination message (current and
// last state) to its share of the pod's cap, keeping its beginning.
func capMessages(pod *v1.Pod, s *v1.PodStatus) {
	share := maxPodTerminationMessages
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		share /= n
	}
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range list {
			capTerminated(list[i].State.Terminated, share)
			capTerminated(list[i].LastTerminationState.Terminated, share)
		}
	}
}

func capTerminated(t *v1.ContainerStateTerminated, max int) {
	if t == nil || len(t.Message) <= max {
		return
	}
	cut := max
	// Not in the middle of a character: the API carries UTF-8.
	for cut > 0 && cut > max-utf8.UTFMax && !utf8.RuneStart(t.Message[cut]) {
		cut--
	}
	t.Message = t.Message[:cut]
}
