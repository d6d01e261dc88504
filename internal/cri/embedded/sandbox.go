package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// newID returns a random 64-hex-digit identifier, like other runtimes use.
func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RunPodSandbox records a new sandbox. Sandboxes share the host network and
// have no process of their own, so it is READY at once.
func (r *Runtime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	if config == nil {
		return "", errInvalid("RunPodSandbox: field config is required")
	}
	md := config.GetMetadata()
	switch {
	case md == nil:
		return "", errInvalid("RunPodSandbox: field metadata is required")
	case md.GetName() == "":
		return "", errInvalid("RunPodSandbox: field metadata.name is required")
	case md.GetNamespace() == "":
		return "", errInvalid("RunPodSandbox %q: field metadata.namespace is required", md.GetName())
	case md.GetUid() == "":
		return "", errInvalid("RunPodSandbox %s/%s: field metadata.uid is required", md.GetNamespace(), md.GetName())
	}
	if runtimeHandler != "" {
		return "", errInvalid("RunPodSandbox %s/%s: field runtimeHandler %q is not supported (only the default handler)", md.GetNamespace(), md.GetName(), runtimeHandler)
	}
	rec := &sandboxRecord{
		ID: newID(), Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt(),
		Labels: copyMap(config.GetLabels()), Annotations: copyMap(config.GetAnnotations()),
		LogDirectory: config.GetLogDirectory(), CgroupParent: config.GetLinux().GetCgroupParent(),
		IP: r.nodeIP, Ready: true, CreatedAt: r.clock.Now().UnixNano(),
	}
	if rec.LogDirectory != "" {
		if err := os.MkdirAll(rec.LogDirectory, 0o755); err != nil {
			return "", fmt.Errorf("RunPodSandbox %s/%s: create log directory: %w", rec.Namespace, rec.Name, err)
		}
	}
	if err := r.saveSandbox(rec); err != nil {
		return "", err
	}
	r.mu.Lock()
	r.sandboxes[rec.ID] = rec
	r.mu.Unlock()
	r.log.Info("sandbox created", "sandbox", rec.ID, "pod", rec.Namespace+"/"+rec.Name)
	return rec.ID, nil
}

func (r *Runtime) saveSandbox(rec *sandboxRecord) error {
	if err := statefile.Write(filepath.Join(r.sandboxDir(), rec.ID+".json"), rec); err != nil {
		return fmt.Errorf("save sandbox %s: %w", rec.ID, err)
	}
	return nil
}

func (r *Runtime) getSandbox(id string) (*sandboxRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok {
		return nil, errNotFound("pod sandbox %q", id)
	}
	return sb, nil
}

// sandboxContainers returns the ids of the containers of a sandbox.
func (r *Runtime) sandboxContainers(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for cid, c := range r.containers {
		if c.rec.SandboxID == id {
			ids = append(ids, cid)
		}
	}
	return ids
}

// StopPodSandbox kills the sandbox's remaining containers (the kubelet has
// already stopped them gracefully) and marks it NOTREADY. Idempotent.
func (r *Runtime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	if _, err := r.getSandbox(podSandboxID); err != nil {
		return err
	}
	for _, cid := range r.sandboxContainers(podSandboxID) {
		if err := r.StopContainer(ctx, cid, 0); err != nil && !isNotFound(err) {
			return fmt.Errorf("stop pod sandbox %s: %w", podSandboxID, err)
		}
	}
	r.mu.Lock()
	sb, ok := r.sandboxes[podSandboxID]
	if !ok {
		r.mu.Unlock()
		return nil
	}
	wasReady := sb.Ready
	updated := *sb
	updated.Ready = false
	r.mu.Unlock()
	if !wasReady {
		return nil
	}
	if err := r.saveSandbox(&updated); err != nil {
		return err
	}
	r.mu.Lock()
	if cur, ok := r.sandboxes[podSandboxID]; ok {
		cur.Ready = false
	}
	r.mu.Unlock()
	r.log.Info("sandbox stopped", "sandbox", podSandboxID)
	return nil
}

// RemovePodSandbox removes the sandbox and all its containers. Removing an
// unknown sandbox is not an error (CRI: the call is idempotent).
func (r *Runtime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	if _, err := r.getSandbox(podSandboxID); err != nil {
		return nil
	}
	for _, cid := range r.sandboxContainers(podSandboxID) {
		if err := r.RemoveContainer(ctx, cid); err != nil {
			return fmt.Errorf("remove pod sandbox %s: %w", podSandboxID, err)
		}
	}
	if err := os.Remove(filepath.Join(r.sandboxDir(), podSandboxID+".json")); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove pod sandbox %s: %w", podSandboxID, err)
	}
	r.mu.Lock()
	delete(r.sandboxes, podSandboxID)
	r.mu.Unlock()
	r.log.Info("sandbox removed", "sandbox", podSandboxID)
	return nil
}

// PodSandboxStatus reports a sandbox.
func (r *Runtime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[podSandboxID]
	if !ok {
		return nil, errNotFound("pod sandbox %q", podSandboxID)
	}
	st := &runtimeapi.PodSandboxStatus{
		Id:        sb.ID,
		Metadata:  sandboxMetadata(sb),
		State:     sandboxState(sb),
		CreatedAt: sb.CreatedAt,
		Network:   &runtimeapi.PodSandboxNetworkStatus{Ip: sb.IP},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
			Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE,
		}}},
		Labels:         copyMap(sb.Labels),
		Annotations:    copyMap(sb.Annotations),
		RuntimeHandler: sb.RuntimeHandler,
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st}, nil
}

// ListPodSandbox lists sandboxes matching filter (id, state, labels), oldest
// first.
func (r *Runtime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, sb := range r.sandboxes {
		if filter != nil {
			if filter.GetId() != "" && !matchID(sb.ID, filter.GetId()) {
				continue
			}
			if filter.GetState() != nil && filter.GetState().GetState() != sandboxState(sb) {
				continue
			}
			if !matchLabels(sb.Labels, filter.GetLabelSelector()) {
				continue
			}
		}
		out = append(out, &runtimeapi.PodSandbox{
			Id: sb.ID, Metadata: sandboxMetadata(sb), State: sandboxState(sb), CreatedAt: sb.CreatedAt,
			Labels: copyMap(sb.Labels), Annotations: copyMap(sb.Annotations), RuntimeHandler: sb.RuntimeHandler,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out, nil
}

func sandboxMetadata(sb *sandboxRecord) *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: sb.Name, Namespace: sb.Namespace, Uid: sb.UID, Attempt: sb.Attempt}
}

func sandboxState(sb *sandboxRecord) runtimeapi.PodSandboxState {
	if sb.Ready {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// matchID accepts the full id or a unique-enough prefix, as other runtimes do.
func matchID(id, want string) bool { return strings.HasPrefix(id, want) }

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
