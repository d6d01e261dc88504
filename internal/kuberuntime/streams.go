package kuberuntime

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
)

// StreamingRuntime is the part of the CRI that hands out the URLs of its
// streaming server for exec, attach and port-forward.
type StreamingRuntime interface {
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// StreamOptions are the standard streams a client asks for.
type StreamOptions struct {
	Stdin, Stdout, Stderr, TTY bool
}

// Streams finds a pod's running container or ready sandbox in the runtime
// and asks the runtime's streaming server for a URL, which the kubelet API
// then proxies, as the kubelet does.
type Streams struct {
	m  *Manager
	rt StreamingRuntime
}

// NewStreams serves streaming requests for the pods m runs through rt.
func NewStreams(m *Manager, rt StreamingRuntime) *Streams {
	return &Streams{m: m, rt: rt}
}

// ExecURL is where to stream cmd run in container ctr of pod.
func (s *Streams) ExecURL(ctx context.Context, pod *v1.Pod, ctr string, cmd []string, o StreamOptions) (*url.URL, error) {
	if len(cmd) == 0 {
		return nil, fmt.Errorf("exec in pod %s/%s: field command is required: %w", pod.Namespace, pod.Name, errdefs.ErrInvalidArgument)
	}
	id, err := s.runningContainer(ctx, pod, ctr)
	if err != nil {
		return nil, err
	}
	resp, err := s.rt.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: cmd, Tty: o.TTY, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr && !o.TTY,
	})
	if err != nil {
		return nil, fmt.Errorf("exec in container %q of pod %s/%s: %w", ctr, pod.Namespace, pod.Name, criError(err))
	}
	return parseStreamURL(resp.GetUrl())
}

// AttachURL is where to stream the standard streams of container ctr.
func (s *Streams) AttachURL(ctx context.Context, pod *v1.Pod, ctr string, o StreamOptions) (*url.URL, error) {
	id, err := s.runningContainer(ctx, pod, ctr)
	if err != nil {
		return nil, err
	}
	resp, err := s.rt.Attach(ctx, &runtimeapi.AttachRequest{
		ContainerId: id, Tty: o.TTY, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr && !o.TTY,
	})
	if err != nil {
		return nil, fmt.Errorf("attach to container %q of pod %s/%s: %w", ctr, pod.Namespace, pod.Name, criError(err))
	}
	return parseStreamURL(resp.GetUrl())
}

// PortForwardURL is where to stream connections to ports of pod.
func (s *Streams) PortForwardURL(ctx context.Context, pod *v1.Pod, ports []int32) (*url.URL, error) {
	ps, err := s.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return nil, err
	}
	sb, _ := ps.NewestSandbox()
	if sb == nil || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, fmt.Errorf("port-forward to pod %s/%s: the pod has no ready sandbox: %w", pod.Namespace, pod.Name, errdefs.ErrConflict)
	}
	resp, err := s.rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sb.ID, Port: ports})
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, criError(err))
	}
	return parseStreamURL(resp.GetUrl())
}

// Run runs cmd in container ctr of pod and returns its combined output
// (the kubelet's /run).
func (s *Streams) Run(ctx context.Context, pod *v1.Pod, ctr string, cmd []string) ([]byte, error) {
	if len(cmd) == 0 {
		return nil, fmt.Errorf("run in pod %s/%s: field cmd is required: %w", pod.Namespace, pod.Name, errdefs.ErrInvalidArgument)
	}
	id, err := s.runningContainer(ctx, pod, ctr)
	if err != nil {
		return nil, err
	}
	stdout, stderr, err := s.rt.ExecSync(ctx, id, cmd, 0)
	return append(stdout, stderr...), err
}

// runningContainer is the runtime ID of the running instance of ctr.
func (s *Streams) runningContainer(ctx context.Context, pod *v1.Pod, ctr string) (string, error) {
	ps, err := s.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return "", err
	}
	c := ps.FindContainer(ctr)
	switch {
	case c == nil:
		return "", fmt.Errorf("container %q in pod %s/%s: no such container in the runtime: %w", ctr, pod.Namespace, pod.Name, errdefs.ErrNotFound)
	case c.State != container.StateRunning:
		return "", fmt.Errorf("container %q in pod %s/%s is %s, not running: %w", ctr, pod.Namespace, pod.Name, c.State, errdefs.ErrConflict)
	}
	return c.ID.ID, nil
}

func parseStreamURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("the runtime's streaming URL %q is not an absolute URL: %w", raw, errdefs.ErrUnavailable)
	}
	return u, nil
}

// criError classifies a runtime's gRPC error for the API's status codes.
func criError(err error) error {
	switch grpcstatus.Code(err) {
	case codes.NotFound:
		return errdefs.Classify(err, errdefs.ErrNotFound)
	case codes.InvalidArgument:
		return errdefs.Classify(err, errdefs.ErrInvalidArgument)
	case codes.FailedPrecondition:
		return errdefs.Classify(err, errdefs.ErrConflict)
	case codes.Unimplemented, codes.Unavailable:
		return errdefs.Classify(err, errdefs.ErrUnavailable)
	}
	return err
}
