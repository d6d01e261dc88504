package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/minilet/minilet/internal/cri/embedded/podns"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
	"github.com/minilet/minilet/internal/logs"
)

// The runtime's streaming server serves exec, attach and port-forward
// sessions as other CRI runtimes do: Exec, Attach and PortForward hand out
// a single-use URL on a loopback port, and the kubelet API proxies the
// client's upgraded connection (SPDY or WebSocket) there. It starts with
// the first request.
type streamServer struct {
	once sync.Once
	srv  streaming.Server
	http *http.Server
	err  error
}

func (r *Runtime) streams() (streaming.Server, error) {
	s := &r.streaming
	s.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.err = fmt.Errorf("streaming server: %w", err)
			return
		}
		cfg := streaming.DefaultConfig
		cfg.Addr = ln.Addr().String()
		cfg.BaseURL = &url.URL{Scheme: "http", Host: ln.Addr().String()}
		s.srv, s.err = streaming.NewServer(cfg, streamRuntime{r})
		if s.err != nil {
			_ = ln.Close()
			return
		}
		// Header and idle timeouts as the agent's own servers (the kubelet's).
		s.http = &http.Server{Handler: s.srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
		go func() { _ = s.http.Serve(ln) }()
		r.log.Debug("streaming server started", "address", cfg.Addr)
	})
	return s.srv, s.err
}

func (s *streamServer) stop() {
	if s.http != nil {
		_ = s.http.Close()
	}
}

// Exec returns the URL of an exec session in a running container.
func (r *Runtime) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if err := r.running(req.GetContainerId()); err != nil {
		return nil, err
	}
	srv, err := r.streams()
	if err != nil {
		return nil, criErr(err)
	}
	return srv.GetExec(req)
}

// Attach returns the URL of a session attached to a running container's
// output (its log, from now on) and, for a container created with stdin,
// its input.
func (r *Runtime) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := r.running(req.GetContainerId()); err != nil {
		return nil, err
	}
	if req.GetStdin() {
		if c, err := r.ctrs.Get(req.GetContainerId()); err == nil && !c.Stdin {
			return nil, errInvalid("attach to container %s with stdin: the container was not created with stdin: true", req.GetContainerId())
		}
	}
	srv, err := r.streams()
	if err != nil {
		return nil, criErr(err)
	}
	return srv.GetAttach(req)
}

// PortForward returns the URL of a port-forward session to a ready sandbox.
func (r *Runtime) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	sb, err := r.sandboxes.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, criErr(err)
	}
	if !sb.Ready {
		return nil, errConflict("port-forward to sandbox %s: sandbox is not ready", req.GetPodSandboxId())
	}
	srv, err := r.streams()
	if err != nil {
		return nil, criErr(err)
	}
	return srv.GetPortForward(req)
}

func (r *Runtime) running(id string) error {
	c, err := r.ctrs.Get(id)
	if err != nil {
		return criErr(err)
	}
	if c.State() != supervisor.Running {
		return errConflict("container %s is not running", id)
	}
	return nil
}

// streamRuntime runs the sessions the streaming server accepted.
type streamRuntime struct{ r *Runtime }

func (s streamRuntime) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	stdio := supervisor.Stdio{TTY: tty, Resize: termSizes(ctx, resize)}
	if in != nil {
		stdio.In = in
	}
	if out != nil {
		stdio.Out = out
	}
	if errw != nil {
		stdio.Err = errw
	}
	return s.r.ctrs.ExecStream(ctx, id, cmd, 0, stdio)
}

// Attach streams what the container writes from now on, and in to its
// stdin, until it stops or the client leaves.
func (s streamRuntime) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	c, err := s.r.ctrs.Get(id)
	if err != nil {
		return err
	}
	// From now on: set before any input reaches the container, so that
	// its answers are not missed.
	since := time.Now()
	if in != nil {
		conn, err := s.r.ctrs.AttachStdin(id)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		go func() {
			_, _ = io.Copy(conn, in)
			_ = conn.Close() // the client's stdin ended: so does a StdinOnce container's
		}()
	}
	w := io.Writer(io.Discard)
	switch {
	case out != nil:
		w = out
	case errw != nil:
		w = errw
	}
	return logs.ReadLogs(ctx, c.LogFile, logs.Options{
		Follow: true, Since: since,
		Done: func() bool {
			c, err := s.r.ctrs.Get(id)
			return err != nil || c.State() != supervisor.Running
		},
	}, w)
}

// PortForward connects stream to port on the pod's loopback: in the pod's
// network namespace, or the host's for a pod on the host's network.
func (s streamRuntime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	sb, err := s.r.sandboxes.Get(sandboxID)
	if err != nil {
		return err
	}
	conn, err := podns.DialIn(ctx, sb.Namespaces[string(podns.Net)], net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port-forward to port %d of sandbox %s: %w", port, sandboxID, err)
	}
	defer func() { _ = conn.Close() }()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // the client is done sending
		}
		done <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		done <- err
	}()
	// The session ends when both directions are done, either fails, or
	// the client leaves.
	for range 2 {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("port-forward to port %d of sandbox %s: %w", port, sandboxID, err)
			}
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// termSizes converts the streaming server's resize events.
func termSizes(ctx context.Context, in <-chan remotecommand.TerminalSize) <-chan supervisor.TermSize {
	if in == nil {
		return nil
	}
	out := make(chan supervisor.TermSize)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- supervisor.TermSize{Width: sz.Width, Height: sz.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
