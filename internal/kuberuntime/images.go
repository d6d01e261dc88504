package kuberuntime

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image waiting reasons and events, in the kubelet's words.
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	reasonErrImageNeverPull = "ErrImageNeverPull"
	reasonInvalidImageName  = "InvalidImageName"
	reasonImageInspectError = "ImageInspectError"
	eventInspectFailed      = "InspectFailed"
)

// PullParallelism turns the kubelet's serializeImagePulls and
// maxParallelImagePulls into Config.MaxParallelImagePulls: 1 when pulls
// are serialized, the limit when one is set, otherwise -1 (unlimited).
func PullParallelism(serialize bool, maxParallel int) int {
	switch {
	case serialize:
		return 1
	case maxParallel > 0:
		return maxParallel
	}
	return -1
}

// pullLimiter admits at most n pulls at a time (nil: no limit).
type pullLimiter chan struct{}

func newPullLimiter(n int) pullLimiter {
	if n == 0 {
		n = 1 // serialized, like the kubelet's default
	}
	if n < 0 {
		return nil
	}
	return make(pullLimiter, n)
}

func (l pullLimiter) acquire(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l pullLimiter) release() {
	if l != nil {
		<-l
	}
}

// isHostImage reports whether the reference means the host's root
// filesystem, which needs no pull.
func isHostImage(image string) bool { return image == "" || image == "host" }

// validateImageName checks the reference is a well-formed Docker image
// reference, as the kubelet does before inspecting or pulling it.
func validateImageName(image string) error {
	if _, err := name.ParseReference(image, name.WeakValidation); err != nil {
		return fmt.Errorf("couldn't parse image name %q: invalid reference format", image)
	}
	return nil
}

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
	if err := validateImageName(c.Image); err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", c.Image, err)
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, eventInspectFailed, msg)
		return reasonInvalidImageName, msg, 0
	}
	spec := &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image}
	policy := pullPolicy(c)
	present := false
	if policy != v1.PullAlways {
		resp, err := m.cfg.Images.ImageStatus(ctx, spec, false)
		if err != nil {
			msg := fmt.Sprintf("Failed to inspect image %q: %v", c.Image, err)
			m.cfg.Recorder.Event(pod, v1.EventTypeWarning, eventInspectFailed, msg)
			return reasonImageInspectError, msg, backoffInitial
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
	if left, lastErr, in := m.imageBackoff.waiting(key); in {
		// Between attempts: ImagePullBackOff, with the last pull's error.
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		m.cfg.Recorder.Event(pod, v1.EventTypeNormal, "BackOff", msg)
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+reasonImagePullBackOff)
		if lastErr != "" {
			msg += ": " + lastErr
		}
		return reasonImagePullBackOff, msg, left
	}
	m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
	ref, pulled, waited, err := m.pull(ctx, spec, sandboxCfg)
	if err != nil {
		// The failed attempt: ErrImagePull, until a sync shortly after
		// shows the wait for the next one.
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.Image, err)
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+reasonErrImagePull)
		requeue := m.imageBackoff.failed(key, m.clock.Now(), reasonErrImagePull+": "+err.Error())
		return reasonErrImagePull, err.Error(), requeue
	}
	m.imageBackoff.succeeded(key)
	m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes.",
		c.Image, pulled.Round(time.Millisecond), waited.Round(time.Millisecond), m.imageSize(ctx, ref, spec))
	return "", "", 0
}

// pull pulls one image within the parallel-pull limit; it returns the
// image reference, the time the pull itself took and that time plus the
// wait for a pull slot.
func (m *Manager) pull(ctx context.Context, spec *runtimeapi.ImageSpec, sandboxCfg *runtimeapi.PodSandboxConfig) (ref string, pulled, total time.Duration, err error) {
	queued := m.clock.Now()
	if err := m.pulls.acquire(ctx); err != nil {
		return "", 0, 0, fmt.Errorf("waiting to pull: %w", err)
	}
	defer m.pulls.release()
	start := m.clock.Now()
	ref, err = m.cfg.Images.PullImage(ctx, spec, nil, sandboxCfg)
	return ref, m.clock.Since(start), m.clock.Since(queued), err
}

// imageSize asks the runtime for the pulled image's size (0 if it cannot
// say).
func (m *Manager) imageSize(ctx context.Context, ref string, spec *runtimeapi.ImageSpec) uint64 {
	if ref != "" {
		spec = &runtimeapi.ImageSpec{Image: ref}
	}
	resp, err := m.cfg.Images.ImageStatus(ctx, spec, false)
	if err != nil {
		m.log.Debug("image size after pull", "image", spec.GetImage(), "err", err)
		return 0
	}
	return resp.GetImage().GetSize()
}
