package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// A pod that outlived its spec.activeDeadlineSeconds is stopped and ends
// Failed with this reason and message (its event's too), as the kubelet's.
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline reports whether the pod, started at st.StartTime, has
// been active for its activeDeadlineSeconds by now, and when not, how long
// it has left. A pod without a deadline or a start time has none (left 0).
// Static pods are no exception, as with the kubelet.
func activeDeadline(pod *v1.Pod, st v1.PodStatus, now time.Time) (exceeded bool, left time.Duration) {
	if pod.Spec.ActiveDeadlineSeconds == nil || st.StartTime == nil || st.StartTime.IsZero() {
		return false, 0
	}
	allowed := time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second
	active := now.Sub(st.StartTime.Time)
	if active >= allowed {
		return true, 0
	}
	return false, allowed - active
}

// deadlineExceeded turns st into the status of a pod stopped for its
// active deadline.
func deadlineExceeded(st v1.PodStatus) v1.PodStatus {
	st.Phase, st.Reason, st.Message = v1.PodFailed, ReasonDeadlineExceeded, MessageDeadlineExceeded
	return st
}
