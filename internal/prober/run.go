package prober

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/prober/probe"
	"github.com/minilet/minilet/internal/prober/probe/exec"
	grpcprobe "github.com/minilet/minilet/internal/prober/probe/grpc"
	httpprobe "github.com/minilet/minilet/internal/prober/probe/http"
	"github.com/minilet/minilet/internal/prober/probe/tcp"
)

// maxRetries is how often a probe that errors (could not run) is tried.
const maxRetries = 3

// runProbe runs w's probe (retrying errors), records the events and the
// metrics, and folds the handler's result into Success or Failure. An
// error means the probe could not be run at all.
func (m *Manager) runProbe(ctx context.Context, w *worker, status *v1.PodStatus) (Result, error) {
	start := m.clock.Now()
	var (
		res    probe.Result
		output string
		err    error
	)
	for i := 0; i < maxRetries; i++ {
		res, output, err = m.runHandler(ctx, w, status)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	elapsed := m.clock.Since(start)
	if ctx.Err() != nil {
		// The agent is stopping: the outcome says nothing about the container.
		return Unknown, ctx.Err()
	}
	switch {
	case err != nil:
		m.log.Warn("probe errored", "pod", podRef(w.pod), "container", w.container.Name, "probe", w.kind, "err", err)
		m.warn(w, "Unhealthy", "%s probe errored and resulted in unknown state: %v", w.kind, err)
		m.metrics.observe(w, Unknown, elapsed)
		return Failure, err
	case res == probe.Success || res == probe.Warning:
		if res == probe.Warning {
			m.warn(w, "ProbeWarning", "%s probe warning: %s", w.kind, output)
		}
		m.metrics.observe(w, Success, elapsed)
		return Success, nil
	default:
		m.log.Debug("probe failed", "pod", podRef(w.pod), "container", w.container.Name, "probe", w.kind, "output", output)
		m.warn(w, "Unhealthy", "%s probe failed: %s", w.kind, output)
		m.metrics.observe(w, Failure, elapsed)
		return Failure, nil
	}
}

// warn records a Warning event on w's container (fieldPath
// spec.containers{NAME}), as the kubelet's prober does.
func (m *Manager) warn(w *worker, reason, format string, args ...any) {
	m.cfg.Recorder.Eventf(events.ContainerRef(w.pod, w.container.Name), v1.EventTypeWarning, reason, format, args...)
}

// runHandler runs the one handler the probe has.
func (m *Manager) runHandler(ctx context.Context, w *worker, status *v1.PodStatus) (probe.Result, string, error) {
	p := &w.spec
	c := &w.container
	timeout := seconds(p.TimeoutSeconds)
	switch {
	case p.Exec != nil:
		if m.cfg.Execer == nil {
			return probe.Unknown, "", fmt.Errorf("exec probe: no Execer configured: %w", errdefs.ErrUnavailable)
		}
		id, err := container.ParseID(w.containerID)
		if err != nil {
			return probe.Unknown, "", fmt.Errorf("exec probe: %w", err)
		}
		cmd := expandCommand(p.Exec.Command, c.Env)
		return exec.Probe(ctx, m.cfg.Execer, id, cmd, timeout)
	case p.HTTPGet != nil:
		req, err := httpprobe.NewRequest(p.HTTPGet, c, status.PodIP)
		if err != nil {
			return probe.Unknown, "", err
		}
		return m.http.Probe(ctx, req, timeout)
	case p.TCPSocket != nil:
		port, err := probe.ResolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return probe.Unknown, "", err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = status.PodIP
		}
		return tcp.Probe(ctx, host, port, timeout)
	case p.GRPC != nil:
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		return grpcprobe.Probe(ctx, status.PodIP, int(p.GRPC.Port), service, timeout)
	}
	return probe.Unknown, "", fmt.Errorf("pod %s container %s: %w", podRef(w.pod), c.Name, errNoHandler)
}

// expandCommand replaces $(NAME) with the value of the container's env var
// NAME (literal values only; references to other sources stay as written)
// and $$ with $, as the kubelet does for probe commands.
func expandCommand(cmd []string, env []v1.EnvVar) []string {
	vars := map[string]string{}
	for _, e := range env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = expand(s, vars)
	}
	return out
}

func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := vars[ref[2:len(ref)-1]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
