package server

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/logs"
)

// healthz answers "ok", or, when the sync loop is stuck, 500 with the
// kubelet's list of checks (the reason goes to the log, not the caller).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if s.cfg.Healthy != nil {
		if err := s.cfg.Healthy(); err != nil {
			s.log.Warn("healthz check failed", "check", "syncloop", "err", err)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n"))
			return
		}
	}
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) pods(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Pods == nil {
		s.notEnabled(w, "pods")
		return
	}
	pods := s.cfg.Pods.Pods()
	if pods == nil {
		pods = []v1.Pod{}
	}
	s.writeJSON(w, v1.PodList{
		TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		Items:    pods,
	})
}

func (s *Server) node(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Node == nil {
		s.notEnabled(w, "node")
		return
	}
	n := s.cfg.Node.Node()
	if n == nil {
		s.writeError(w, fmt.Errorf("node object not known yet: %w", errdefs.ErrUnavailable))
		return
	}
	out := n.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	s.writeJSON(w, out)
}

// events serves all events, or with ?pod=NS/NAME those of one pod.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Events == nil {
		s.notEnabled(w, "events")
		return
	}
	var ns, name string
	if pod := r.URL.Query().Get("pod"); pod != "" {
		var ok bool
		ns, name, ok = strings.Cut(pod, "/")
		if !ok || ns == "" || name == "" {
			s.writeError(w, fmt.Errorf("query parameter pod=%q: want NAMESPACE/NAME: %w", pod, errdefs.ErrInvalidArgument))
			return
		}
	}
	evs, err := s.cfg.Events.Events(ns, name)
	if err != nil {
		s.writeError(w, fmt.Errorf("list events: %w", err))
		return
	}
	if evs == nil {
		evs = []v1.Event{}
	}
	s.writeJSON(w, v1.EventList{
		TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"},
		Items:    evs,
	})
}

func (s *Server) summary(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Stats == nil {
		s.notEnabled(w, "stats")
		return
	}
	sum, err := s.cfg.Stats.Summary(r.Context())
	if err != nil {
		s.writeError(w, fmt.Errorf("stats summary: %w", err))
		return
	}
	s.writeJSON(w, sum)
}

func (s *Server) devices(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Devices == nil {
		s.notEnabled(w, "devices")
		return
	}
	devs := append([]Device{}, s.cfg.Devices.Devices()...)
	sort.Slice(devs, func(i, j int) bool {
		if devs[i].Resource != devs[j].Resource {
			return devs[i].Resource < devs[j].Resource
		}
		return devs[i].ID < devs[j].ID
	})
	s.writeJSON(w, DeviceList{Items: devs})
}

func (s *Server) images(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Images == nil {
		s.notEnabled(w, "images")
		return
	}
	imgs, err := s.cfg.Images.Images(r.Context())
	if err != nil {
		s.writeError(w, fmt.Errorf("list images: %w", err))
		return
	}
	if imgs == nil {
		imgs = []Image{}
	}
	s.writeJSON(w, ImageList{Items: imgs})
}

// containerLogs streams a container's log with the kubelet's query
// parameters: follow, tailLines, timestamps, previous, sinceSeconds,
// sinceTime, limitBytes.
func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Logs == nil {
		s.notEnabled(w, "container logs")
		return
	}
	ns, pod, ctr := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts, previous, err := parseLogQuery(r, time.Now())
	if err != nil {
		s.writeError(w, err)
		return
	}
	path, err := s.cfg.Logs.ContainerLogPath(ns, pod, ctr, previous)
	if err != nil {
		s.writeError(w, fmt.Errorf("logs of container %q in pod %s/%s: %w", ctr, ns, pod, err))
		return
	}
	opts.PollInterval = s.cfg.LogPollInterval
	switch {
	case previous:
		// A previous instance is gone: nothing more will be written.
		opts.Done = func() bool { return true }
	case s.cfg.Running != nil:
		// The instance being followed is done when the container stopped,
		// or when it restarted: the new instance writes another file.
		opts.Done = func() bool {
			if !s.cfg.Running.ContainerRunning(ns, pod, ctr) {
				return true
			}
			cur, err := s.cfg.Logs.ContainerLogPath(ns, pod, ctr, false)
			return err != nil || cur != path
		}
	}
	fw := &flushWriter{w: w}
	if opts.Follow {
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = fmt.Errorf("log file %s: %w", path, errdefs.ErrNotFound)
			}
			s.writeError(w, fmt.Errorf("logs of container %q in pod %s/%s: %w", ctr, ns, pod, err))
			return
		}
		// Tell a following client at once that the stream is open.
		fw.start()
	}
	if err := logs.ReadLogs(r.Context(), path, opts, fw); err != nil {
		if !fw.wrote {
			s.writeError(w, fmt.Errorf("logs of container %q in pod %s/%s: %w", ctr, ns, pod, err))
			return
		}
		s.log.Debug("log stream ended", "pod", ns+"/"+pod, "container", ctr, "err", err)
		return
	}
	// An empty log is still a successful answer.
	fw.start()
}

// parseLogQuery turns the kubelet's log query parameters into options.
func parseLogQuery(r *http.Request, now time.Time) (logs.Options, bool, error) {
	q := r.URL.Query()
	var opts logs.Options
	bad := func(name, val, want string) error {
		return fmt.Errorf("query parameter %s=%q: %s: %w", name, val, want, errdefs.ErrInvalidArgument)
	}
	boolParam := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, bad(name, v, "want true or false")
		}
		return b, nil
	}
	intParam := func(name string, min int64) (int64, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return 0, false, bad(name, v, fmt.Sprintf("want an integer >= %d", min))
		}
		return n, true, nil
	}
	var err error
	if opts.Follow, err = boolParam("follow"); err != nil {
		return opts, false, err
	}
	if opts.Timestamps, err = boolParam("timestamps"); err != nil {
		return opts, false, err
	}
	previous, err := boolParam("previous")
	if err != nil {
		return opts, false, err
	}
	if n, ok, err := intParam("tailLines", 0); err != nil {
		return opts, false, err
	} else if ok {
		opts.TailLines = logs.Tail(n)
	}
	limit, _, err := intParam("limitBytes", 1)
	if err != nil {
		return opts, false, err
	}
	opts.LimitBytes = limit
	secs, hasSecs, err := intParam("sinceSeconds", 1)
	if err != nil {
		return opts, false, err
	}
	if hasSecs {
		opts.Since = now.Add(-time.Duration(secs) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if hasSecs {
			return opts, false, fmt.Errorf("query parameters sinceSeconds and sinceTime are exclusive: %w", errdefs.ErrInvalidArgument)
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return opts, false, bad("sinceTime", v, "want an RFC3339 time")
		}
		opts.Since = t
	}
	return opts, previous, nil
}

// flushWriter writes log output as plain text and flushes it at once so
// followed logs reach the client line by line.
type flushWriter struct {
	w     http.ResponseWriter
	wrote bool
}

// start sends the 200 header (once).
func (f *flushWriter) start() {
	if f.wrote {
		return
	}
	f.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	f.w.WriteHeader(http.StatusOK)
	f.wrote = true
	_ = http.NewResponseController(f.w).Flush()
}

func (f *flushWriter) Write(p []byte) (int, error) {
	f.start()
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	return n, http.NewResponseController(f.w).Flush()
}
