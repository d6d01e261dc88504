package prober

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/minilet/minilet/internal/errdefs"
)

// metrics are the kubelet's prober metrics. A nil *metrics records nothing.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober",
			Name:      "probe_total",
			Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "Duration in seconds for a probe response.",
			Buckets:   prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	for _, c := range []prometheus.Collector{m.total, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prober metrics: %w: %w", err, errdefs.ErrAlreadyExists)
		}
	}
	return m, nil
}

func resultLabel(r Result) string {
	switch r {
	case Success:
		return "successful"
	case Failure:
		return "failed"
	}
	return "unknown"
}

func (m *metrics) labels(w *worker, r Result) []string {
	return []string{w.kind.String(), resultLabel(r), w.container.Name, w.pod.Name, w.pod.Namespace, string(w.pod.UID)}
}

// prepare creates w's series at zero, so they exist before the first probe.
func (m *metrics) prepare(w *worker) {
	if m == nil {
		return
	}
	for _, r := range []Result{Success, Failure, Unknown} {
		m.total.WithLabelValues(m.labels(w, r)...)
	}
}

func (m *metrics) observe(w *worker, r Result, d time.Duration) {
	if m == nil {
		return
	}
	m.total.WithLabelValues(m.labels(w, r)...).Inc()
	m.duration.WithLabelValues(w.kind.String(), w.container.Name, w.pod.Name, w.pod.Namespace).Observe(d.Seconds())
}

// forget drops w's series when the worker stops.
func (m *metrics) forget(w *worker) {
	if m == nil {
		return
	}
	for _, r := range []Result{Success, Failure, Unknown} {
		m.total.DeleteLabelValues(m.labels(w, r)...)
	}
	m.duration.DeleteLabelValues(w.kind.String(), w.container.Name, w.pod.Name, w.pod.Namespace)
}
