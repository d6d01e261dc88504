package kuberuntime

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
)

// GetPodStatus asks the runtime for every sandbox and container of the
// pod with the given UID, newest first. A container the runtime marks as
// recovered from lost state gets its ContainerStateLost event here.
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	sel := map[string]string{labelPodUID: string(uid)}
	sbs, err := m.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of pod %s/%s: %w", namespace, name, err)
	}
	ps := &container.PodStatus{UID: uid, Name: name, Namespace: namespace}
	for _, sb := range sbs {
		s := convertSandbox(sb)
		resp, err := m.cfg.Runtime.PodSandboxStatus(ctx, sb.Id, false)
		switch {
		case err == nil && resp.GetStatus() != nil:
			s.State = resp.Status.State
			s.IP = resp.Status.GetNetwork().GetIp()
		case isNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("status of sandbox %s of pod %s/%s: %w", sb.Id, namespace, name, err)
		}
		ps.Sandboxes = append(ps.Sandboxes, s)
	}
	cs, err := m.cfg.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list containers of pod %s/%s: %w", namespace, name, err)
	}
	for _, c := range cs {
		resp, err := m.cfg.Runtime.ContainerStatus(ctx, c.Id, false)
		if isNotFound(err) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("status of container %s of pod %s/%s: %w", c.Id, namespace, name, err)
		}
		ps.Containers = append(ps.Containers, m.convertContainerStatus(resp.GetStatus(), c))
	}
	sortNewestFirst(ps.Sandboxes, ps.Containers)
	m.reportStateLost(uid, name, namespace, ps)
	return ps, nil
}

// GetPods lists every pod the runtime holds sandboxes or containers for
// (for PLEG and orphan cleanup). Container states come from the listing;
// exit codes need GetPodStatus.
func (m *Manager) GetPods(ctx context.Context) ([]*container.Pod, error) {
	sbs, err := m.cfg.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	cs, err := m.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	byUID := map[types.UID]*container.Pod{}
	get := func(labels map[string]string) *container.Pod {
		uid := types.UID(labels[labelPodUID])
		p, ok := byUID[uid]
		if !ok {
			p = &container.Pod{UID: uid, Name: labels[labelPodName], Namespace: labels[labelPodNamespace]}
			byUID[uid] = p
		}
		return p
	}
	for _, sb := range sbs {
		if sb.Labels[labelPodUID] == "" {
			continue // not a pod we (or a kubelet) made
		}
		p := get(sb.Labels)
		p.Sandboxes = append(p.Sandboxes, convertSandbox(sb))
	}
	for _, c := range cs {
		if c.Labels[labelPodUID] == "" {
			continue
		}
		p := get(c.Labels)
		p.Containers = append(p.Containers, m.convertContainer(c))
	}
	pods := make([]*container.Pod, 0, len(byUID))
	for _, p := range byUID {
		sortNewestFirst(p.Sandboxes, p.Containers)
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].UID < pods[j].UID })
	return pods, nil
}

func convertSandbox(sb *runtimeapi.PodSandbox) *container.SandboxStatus {
	return &container.SandboxStatus{
		ID:        sb.Id,
		State:     sb.State,
		CreatedAt: time.Unix(0, sb.CreatedAt),
		Attempt:   sb.GetMetadata().GetAttempt(),
	}
}

func convertState(s runtimeapi.ContainerState) container.State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return container.StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return container.StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return container.StateExited
	default:
		return container.StateUnknown
	}
}

func (m *Manager) convertContainer(c *runtimeapi.Container) *container.ContainerStatus {
	name := c.GetMetadata().GetName()
	if name == "" {
		name = c.Labels[labelContainerName]
	}
	hash, _ := strconv.ParseUint(c.Annotations[annotationHash], 16, 64)
	restarts, _ := strconv.Atoi(c.Annotations[annotationRestartCount])
	return &container.ContainerStatus{
		ID:           container.ID{Type: m.cfg.RuntimeName, ID: c.Id},
		Name:         name,
		State:        convertState(c.State),
		CreatedAt:    time.Unix(0, c.CreatedAt),
		Image:        c.GetImage().GetImage(),
		ImageRef:     c.ImageRef,
		Hash:         hash,
		RestartCount: restarts,
	}
}

func (m *Manager) convertContainerStatus(s *runtimeapi.ContainerStatus, listed *runtimeapi.Container) *container.ContainerStatus {
	out := m.convertContainer(listed)
	if s == nil {
		return out
	}
	out.State = convertState(s.State)
	if s.CreatedAt != 0 {
		out.CreatedAt = time.Unix(0, s.CreatedAt)
	}
	if s.StartedAt != 0 {
		out.StartedAt = time.Unix(0, s.StartedAt)
	}
	if s.FinishedAt != 0 {
		out.FinishedAt = time.Unix(0, s.FinishedAt)
	}
	out.ExitCode = s.ExitCode
	out.Reason = s.Reason
	out.Message = s.Message
	if s.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		// What the container said as it ended follows the runtime's
		// own message, as the kubelet shows it.
		if msg := m.terminationMessage(s); msg != "" {
			if out.Message != "" {
				out.Message += ": "
			}
			out.Message += msg
		}
	}
	out.LogPath = s.LogPath
	out.Resources = s.GetResources().GetLinux()
	if s.ImageRef != "" {
		out.ImageRef = s.ImageRef
	}
	return out
}

func sortNewestFirst(sbs []*container.SandboxStatus, cs []*container.ContainerStatus) {
	sort.SliceStable(sbs, func(i, j int) bool { return sbs[i].CreatedAt.After(sbs[j].CreatedAt) })
	sort.SliceStable(cs, func(i, j int) bool {
		if !cs[i].CreatedAt.Equal(cs[j].CreatedAt) {
			return cs[i].CreatedAt.After(cs[j].CreatedAt)
		}
		return cs[i].RestartCount > cs[j].RestartCount
	})
}

func isNotFound(err error) bool {
	return err != nil && (grpcstatus.Code(err) == codes.NotFound || errdefs.IsNotFound(err))
}
