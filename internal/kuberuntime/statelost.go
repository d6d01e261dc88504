package kuberuntime

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/container"
)

// ReasonContainerStateLost is the status reason a runtime gives a
// container whose state it lost (a monitor killed, a state file deleted or
// corrupt) and then recovered from: the container was killed, its exit
// recorded as unknown, or the running container re-adopted. The status
// message names what was lost and what was done. The manager records it
// as a Warning event of the same reason on the pod, once per container.
// (The embedded runtime's monitorproc.ReasonStateLost.)
const ReasonContainerStateLost = "ContainerStateLost"

// processStart is when this agent process began: an exit marked as state
// lost before it was reported by an earlier run.
var processStart = time.Now()

// reportStateLost records a Warning event for each container of ps the
// runtime marked as recovered from lost state, the first time this run
// sees it. An exited container counts only if its exit was recorded
// during this run (a loss an earlier run found was reported by it).
func (m *Manager) reportStateLost(uid types.UID, name, namespace string, ps *container.PodStatus) {
	for _, c := range ps.Containers {
		if c.Reason != ReasonContainerStateLost {
			continue
		}
		if c.State == container.StateExited && c.FinishedAt.Before(m.cfg.StateLostSince) {
			continue
		}
		m.lostMu.Lock()
		seen := m.lostSeen[c.ID.ID]
		m.lostSeen[c.ID.ID] = true
		m.lostMu.Unlock()
		if seen {
			continue
		}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: uid}}
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, ReasonContainerStateLost,
			"Container %s (%s): %s", c.Name, c.ID.ID, c.Message)
		m.log.Warn("container state lost", "pod", namespace+"/"+name, "container", c.Name, "id", c.ID.ID, "message", c.Message)
	}
}

// forgetStateLost drops what is remembered of removed containers.
func (m *Manager) forgetStateLost(id string) {
	m.lostMu.Lock()
	delete(m.lostSeen, id)
	m.lostMu.Unlock()
}
