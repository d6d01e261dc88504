package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"

	"github.com/minilet/minilet/internal/cri/embedded/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// newID returns a random 64-hex-digit identifier, like other runtimes use.
func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RunPodSandbox records a new sandbox and gives it its namespaces and, off
// the host's network, its CNI network; it is READY once attached.
// Sandboxes have no process of their own.
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
	kinds, pid, err := podNamespaces(config)
	if err != nil {
		return "", errInvalid("RunPodSandbox %s/%s: %v", md.GetNamespace(), md.GetName(), err)
	}
	rec := sandbox.Record{
		ID: newID(), Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt(),
		Labels: maps.Clone(config.GetLabels()), Annotations: maps.Clone(config.GetAnnotations()),
		LogDirectory: config.GetLogDirectory(), CgroupParent: config.GetLinux().GetCgroupParent(),
		IP: r.nodeIP, Hostname: config.GetHostname(), HostPID: pid == runtimeapi.NamespaceMode_NODE, Ports: sandboxPorts(config),
		CreatedAt: r.clock.Now().UnixNano(),
	}
	if rec.LogDirectory != "" {
		if err := os.MkdirAll(rec.LogDirectory, 0o755); err != nil {
			return "", fmt.Errorf("RunPodSandbox %s/%s: create log directory: %w", rec.Namespace, rec.Name, err)
		}
	}
	if err := r.sandboxes.Add(rec); err != nil {
		return "", err
	}
	if err := r.setUpPod(ctx, &rec, kinds, pid); err != nil {
		_ = r.sandboxes.Remove(rec.ID)
		return "", errUnavailable("RunPodSandbox %s/%s: %v", rec.Namespace, rec.Name, err)
	}
	if err := r.writeResolvConf(&rec, config.GetDnsConfig()); err != nil {
		_ = r.tearDownPod(ctx, rec.ID)
		_ = r.sandboxes.Remove(rec.ID)
		return "", err
	}
	rec.Ready = true
	if err := r.sandboxes.Update(rec.ID, func(s *sandbox.Record) { *s = rec }); err != nil {
		_ = r.tearDownPod(ctx, rec.ID)
		_ = r.sandboxes.Remove(rec.ID)
		return "", err
	}
	r.log.Info("sandbox created", "sandbox", rec.ID, "pod", rec.Namespace+"/"+rec.Name, "ip", rec.IP, "namespaces", kinds)
	return rec.ID, nil
}

// sandboxContainers returns the ids of the containers of a sandbox.
func (r *Runtime) sandboxContainers(id string) []string {
	var ids []string
	for _, c := range r.ctrs.List() {
		if c.SandboxID == id {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// StopPodSandbox kills the sandbox's remaining containers (the kubelet has
// already stopped them gracefully) and marks it NOTREADY. Idempotent.
func (r *Runtime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	if _, err := r.sandboxes.Get(podSandboxID); err != nil {
		return criErr(err)
	}
	for _, cid := range r.sandboxContainers(podSandboxID) {
		if err := r.StopContainer(ctx, cid, 0); err != nil && !isNotFound(err) {
			return fmt.Errorf("stop pod sandbox %s: %w", podSandboxID, err)
		}
	}
	stopped, err := r.sandboxes.SetNotReady(podSandboxID)
	if err != nil {
		return err
	}
	if err := r.tearDownPod(ctx, podSandboxID); err != nil {
		return err
	}
	if stopped {
		r.log.Info("sandbox stopped", "sandbox", podSandboxID)
	}
	return nil
}

// RemovePodSandbox removes the sandbox and all its containers. Removing an
// unknown sandbox is not an error (CRI: the call is idempotent).
func (r *Runtime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	if _, err := r.sandboxes.Get(podSandboxID); err != nil {
		return nil
	}
	for _, cid := range r.sandboxContainers(podSandboxID) {
		if err := r.RemoveContainer(ctx, cid); err != nil {
			return fmt.Errorf("remove pod sandbox %s: %w", podSandboxID, err)
		}
	}
	if err := r.tearDownPod(ctx, podSandboxID); err != nil {
		return fmt.Errorf("remove pod sandbox %s: %w", podSandboxID, err)
	}
	if err := r.sandboxes.Remove(podSandboxID); err != nil {
		return fmt.Errorf("remove pod sandbox %s: %w", podSandboxID, err)
	}
	r.log.Info("sandbox removed", "sandbox", podSandboxID)
	return nil
}

// PodSandboxStatus reports a sandbox.
func (r *Runtime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := r.sandboxes.Get(podSandboxID)
	if err != nil {
		return nil, criErr(err)
	}
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.ID,
		Metadata:       sandboxMetadata(&sb),
		State:          sandboxState(&sb),
		CreatedAt:      sb.CreatedAt,
		Network:        sandboxNetwork(&sb),
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: namespaceModes(&sb)}},
		Labels:         maps.Clone(sb.Labels),
		Annotations:    maps.Clone(sb.Annotations),
		RuntimeHandler: sb.RuntimeHandler,
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st}, nil
}

// ListPodSandbox lists sandboxes matching filter (id, state, labels), oldest
// first.
func (r *Runtime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	var out []*runtimeapi.PodSandbox
	for _, sb := range r.sandboxes.List() {
		if filter != nil {
			if filter.GetId() != "" && !matchID(sb.ID, filter.GetId()) {
				continue
			}
			if filter.GetState() != nil && filter.GetState().GetState() != sandboxState(&sb) {
				continue
			}
			if !matchLabels(sb.Labels, filter.GetLabelSelector()) {
				continue
			}
		}
		out = append(out, &runtimeapi.PodSandbox{
			Id: sb.ID, Metadata: sandboxMetadata(&sb), State: sandboxState(&sb), CreatedAt: sb.CreatedAt,
			Labels: maps.Clone(sb.Labels), Annotations: maps.Clone(sb.Annotations), RuntimeHandler: sb.RuntimeHandler,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out, nil
}

func sandboxMetadata(sb *sandbox.Record) *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: sb.Name, Namespace: sb.Namespace, Uid: sb.UID, Attempt: sb.Attempt}
}

// sandboxState is READY while the sandbox is, and its pause (holding a
// shared PID namespace) runs.
func sandboxState(sb *sandbox.Record) runtimeapi.PodSandboxState {
	if sb.Ready && pauseAlive(sb) {
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
