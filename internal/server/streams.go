package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"

	"github.com/minilet/minilet/internal/errdefs"
)

// StreamOptions are the standard streams a client asks for.
type StreamOptions struct {
	Stdin, Stdout, Stderr, TTY bool
}

// Streamer hands out the URL of the runtime's streaming server for a
// session; the API proxies the client's upgraded connection there, as the
// kubelet does. Errors wrap errdefs classes.
type Streamer interface {
	ExecURL(ctx context.Context, pod *v1.Pod, container string, cmd []string, o StreamOptions) (*url.URL, error)
	AttachURL(ctx context.Context, pod *v1.Pod, container string, o StreamOptions) (*url.URL, error)
	PortForwardURL(ctx context.Context, pod *v1.Pod, ports []int32) (*url.URL, error)
	// Run runs cmd to its end and returns its combined output.
	Run(ctx context.Context, pod *v1.Pod, container string, cmd []string) ([]byte, error)
}

// routeStreams adds the kubelet's streaming endpoints, with and without
// the pod UID in the path, for GET (WebSocket) and POST (SPDY).
func (s *Server) routeStreams(mux *http.ServeMux) {
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", s.exec)
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{uid}/{container}", s.exec)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{container}", s.attach)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{uid}/{container}", s.attach)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", s.run)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", s.run)
}

// run serves the kubelet's /run: cmd (split at spaces) runs in the
// container and its output is the answer.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Streams == nil || s.cfg.Pods == nil {
		s.notEnabled(w, "run")
		return
	}
	pod, err := s.findPod(r.PathValue("namespace"), r.PathValue("pod"), types.UID(r.PathValue("uid")))
	if err != nil {
		s.writeError(w, fmt.Errorf("run: %w", err))
		return
	}
	out, err := s.cfg.Streams.Run(r.Context(), pod, r.PathValue("container"), strings.Fields(r.FormValue("cmd")))
	if err != nil {
		s.writeError(w, fmt.Errorf("run in container %q of pod %s/%s: %w", r.PathValue("container"), pod.Namespace, pod.Name, err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(out)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	s.stream(w, r, "exec", func(ctx context.Context, pod *v1.Pod) (*url.URL, error) {
		o, err := streamOptions(r)
		if err != nil {
			return nil, err
		}
		return s.cfg.Streams.ExecURL(ctx, pod, r.PathValue("container"), r.URL.Query()["command"], o)
	})
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	s.stream(w, r, "attach", func(ctx context.Context, pod *v1.Pod) (*url.URL, error) {
		o, err := streamOptions(r)
		if err != nil {
			return nil, err
		}
		return s.cfg.Streams.AttachURL(ctx, pod, r.PathValue("container"), o)
	})
}

func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	s.stream(w, r, "port-forward", func(ctx context.Context, pod *v1.Pod) (*url.URL, error) {
		var ports []int32
		for _, v := range r.URL.Query()["port"] {
			for _, p := range strings.Split(v, ",") {
				n, err := strconv.ParseUint(p, 10, 16)
				if err != nil || n == 0 {
					return nil, fmt.Errorf("query parameter port=%q: want a port between 1 and 65535: %w", p, errdefs.ErrInvalidArgument)
				}
				ports = append(ports, int32(n))
			}
		}
		return s.cfg.Streams.PortForwardURL(ctx, pod, ports)
	})
}

// stream finds the pod of the request, asks for the session's URL and
// proxies the upgraded connection to it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, what string, target func(context.Context, *v1.Pod) (*url.URL, error)) {
	if s.cfg.Streams == nil || s.cfg.Pods == nil {
		s.notEnabled(w, what)
		return
	}
	pod, err := s.findPod(r.PathValue("namespace"), r.PathValue("pod"), types.UID(r.PathValue("uid")))
	if err != nil {
		s.writeError(w, fmt.Errorf("%s: %w", what, err))
		return
	}
	u, err := target(r.Context(), pod)
	if err != nil {
		s.writeError(w, fmt.Errorf("%s: %w", what, err))
		return
	}
	h := proxy.NewUpgradeAwareHandler(u, nil, false, true, proxyResponder{s})
	h.ServeHTTP(w, r)
}

// findPod is the pod ns/name (with that UID when uid is set).
func (s *Server) findPod(ns, name string, uid types.UID) (*v1.Pod, error) {
	for _, p := range s.cfg.Pods.Pods() {
		if p.Namespace == ns && p.Name == name && (uid == "" || p.UID == uid) {
			return &p, nil
		}
	}
	if uid != "" {
		return nil, fmt.Errorf("pod %s/%s with UID %s: %w", ns, name, uid, errdefs.ErrNotFound)
	}
	return nil, fmt.Errorf("pod %s/%s: %w", ns, name, errdefs.ErrNotFound)
}

// streamOptions reads the kubelet's stream flags: input, output, error,
// tty ("1" = on). A TTY merges stderr into stdout.
func streamOptions(r *http.Request) (StreamOptions, error) {
	q := r.URL.Query()
	o := StreamOptions{Stdin: q.Get("input") == "1", Stdout: q.Get("output") == "1", Stderr: q.Get("error") == "1", TTY: q.Get("tty") == "1"}
	if o.TTY {
		o.Stderr = false
	}
	if !o.Stdin && !o.Stdout && !o.Stderr {
		return o, errors.Join(errors.New("you must specify at least 1 of stdin, stdout, stderr"), errdefs.ErrInvalidArgument)
	}
	return o, nil
}

// proxyResponder reports a failed proxy connection as a Status.
type proxyResponder struct{ s *Server }

func (p proxyResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	p.s.writeError(w, fmt.Errorf("streaming: %w", errors.Join(err, errdefs.ErrUnavailable)))
}
