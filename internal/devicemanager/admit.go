package devicemanager

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
)

// Admit allocates the devices a new pod asks for, as the kubelet's device
// admission does before its resource fit. A pod that cannot get them is
// rejected with the AdmissionError's reason and message.
func (m *Manager) Admit(ctx context.Context, pod *v1.Pod, _ []*v1.Pod) (ok bool, reason, message string) {
	err := m.Allocate(ctx, pod)
	if err == nil {
		return true, "", ""
	}
	var ae *AdmissionError
	if errors.As(err, &ae) {
		return false, ae.Reason(), err.Error()
	}
	return false, ReasonUnexpectedAdmissionError, err.Error()
}
