package devicemanager

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ReasonWaitingForDevicePlugin is the Normal event on a pod whose
// admission waits for a device plugin to register again (after an agent
// or plugin restart). The kubelet has no such wait: it fails the pod.
const ReasonWaitingForDevicePlugin = "WaitingForDevicePlugin"

// waitForPlugins waits while a resource the pod asks for is known (it
// had a plugin, in this run or the last) but its plugin is not connected
// or has not listed its devices yet, for at most PluginWait after the
// plugin went away: once a plugin has been gone that long, pods fail at
// once, so a plugin that never returns delays the sync loop only once.
// Pods that hold their devices already (restored from the checkpoint)
// never wait.
func (m *Manager) waitForPlugins(ctx context.Context, pod *v1.Pod) {
	var names []string
	for i := range pod.Spec.InitContainers {
		names = append(names, deviceRequests(&pod.Spec.InitContainers[i])...)
	}
	for i := range pod.Spec.Containers {
		names = append(names, deviceRequests(&pod.Spec.Containers[i])...)
	}
	if len(names) == 0 {
		return
	}
	overall := m.clock.Now().Add(m.cfg.PluginWait)
	told := false
	for {
		m.mu.Lock()
		now := m.clock.Now()
		waiting, deadline := "", overall
		if m.podDevs[pod.UID] == nil {
			for _, name := range names {
				e := m.endpoints[name]
				if e == nil || (e.running() && e.listed) {
					continue
				}
				d := overall
				if !e.stoppedAt.IsZero() && e.stoppedAt.Add(m.cfg.PluginWait).Before(d) {
					d = e.stoppedAt.Add(m.cfg.PluginWait)
				}
				if now.Before(d) {
					waiting, deadline = name, d
					break
				}
			}
		}
		listed := m.listed
		m.mu.Unlock()
		if waiting == "" {
			return
		}
		left := deadline.Sub(now)
		if !told {
			told = true
			m.log.Info("waiting for a device plugin before admitting a pod", "resource", waiting,
				"pod", pod.Namespace+"/"+pod.Name, "atMost", left.Round(time.Millisecond))
			m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, ReasonWaitingForDevicePlugin,
				"Waiting up to %v for the device plugin of %s to register", left.Round(100*time.Millisecond), waiting)
		}
		timer := time.NewTimer(left)
		select {
		case <-listed:
			timer.Stop() // a plugin listed its devices: look again
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
			return // waited long enough: Allocate fails as it would have
		}
	}
}
