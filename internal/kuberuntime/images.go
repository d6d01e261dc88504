package kuberuntime

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image waiting reasons and events, in the kubelet's words.
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	reasonErrImageNeverPull = "ErrImageNeverPull"
)

// isHostImage reports whether the reference means the host's root
// filesystem, which needs no pull.
func isHostImage(image string) bool { return image == "" || image == "host" }

// pullPolicy defaults like the API server: Always for :latest or untagged
// images, IfNotPresent otherwise.
func pullPolicy(c *v1.Container) v1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	ref := c.Image
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		return v1.PullIfNotPresent // pinned by digest
	}
	tag := ""
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		tag = ref[i+1:]
	}
	if tag == "" || tag == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// ensureImage makes the container's image present per its pull policy.
// On failure it returns the waiting reason, message and, for back-off, how
// long until the next attempt.
func (m *Manager) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, sandboxCfg *runtimeapi.PodSandboxConfig) (reason, msg string, retry time.Duration) {
	if isHostImage(c.Image) {
		return "", "", 0
	}
	spec := &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image}
	policy := pullPolicy(c)
	present := false
	if policy != v1.PullAlways {
		resp, err := m.cfg.Images.ImageStatus(ctx, spec, false)
		if err != nil {
			msg := fmt.Sprintf("Failed to inspect image %q: %v", c.Image, err)
			m.cfg.Recorder.Event(pod, v1.EventTypeWarning, "InspectFailed", msg)
			return "ImageInspectError", msg, backoffInitial
		}
		present = resp.GetImage() != nil
	}
	if present {
		m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine", c.Image)
		return "", "", 0
	}
	if policy == v1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, reasonErrImageNeverPull, msg)
		return reasonErrImageNeverPull, msg, 0
	}
	key := string(pod.UID) + "/" + c.Image
	if left, in := m.imageBackoff.inBackoffSinceUpdate(key); in {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		m.cfg.Recorder.Event(pod, v1.EventTypeNormal, "BackOff", msg)
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+reasonImagePullBackOff)
		return reasonImagePullBackOff, msg, left
	}
	m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
	start := m.clock.Now()
	if _, err := m.cfg.Images.PullImage(ctx, spec, nil, sandboxCfg); err != nil {
		m.imageBackoff.next(key, m.clock.Now())
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.Image, err)
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+reasonErrImagePull)
		left, _ := m.imageBackoff.inBackoffSinceUpdate(key)
		return reasonErrImagePull, err.Error(), left
	}
	m.imageBackoff.reset(key)
	m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %v", c.Image, m.clock.Since(start).Round(time.Millisecond))
	return "", "", 0
}
