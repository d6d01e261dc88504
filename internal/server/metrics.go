package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// prefixGatherer serves only the metric families whose name has prefix.
type prefixGatherer struct {
	g      prometheus.Gatherer
	prefix string
}

func (p prefixGatherer) Gather() ([]*dto.MetricFamily, error) {
	all, err := p.g.Gather()
	out := all[:0]
	for _, mf := range all {
		if strings.HasPrefix(mf.GetName(), p.prefix) {
			out = append(out, mf)
		}
	}
	return out, err
}

// The metrics of /metrics/resource, named as the kubelet names them:
// what metrics-server and `kubectl top` read.
var (
	nodeCPUDesc     = prometheus.NewDesc("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemDesc     = prometheus.NewDesc("node_memory_working_set_bytes", "Current working set of the node in bytes", nil, nil)
	podCPUDesc      = prometheus.NewDesc("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", []string{"namespace", "pod"}, nil)
	podMemDesc      = prometheus.NewDesc("pod_memory_working_set_bytes", "Current working set of the pod in bytes", []string{"namespace", "pod"}, nil)
	ctrCPUDesc      = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", []string{"container", "namespace", "pod"}, nil)
	ctrMemDesc      = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", []string{"container", "namespace", "pod"}, nil)
	ctrStartDesc    = prometheus.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds", []string{"container", "namespace", "pod"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	resourceDescs   = []*prometheus.Desc{nodeCPUDesc, nodeMemDesc, podCPUDesc, podMemDesc, ctrCPUDesc, ctrMemDesc, ctrStartDesc, scrapeErrorDesc}
)

// resourceMetrics serves /metrics/resource from the Summary API.
func (s *Server) resourceMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Stats == nil {
		s.notEnabled(w, "stats")
		return
	}
	sum, err := s.cfg.Stats.Summary(r.Context())
	reg := prometheus.NewRegistry()
	reg.MustRegister(summaryCollector{sum: sum, failed: err != nil})
	if err != nil {
		s.log.Debug("resource metrics: summary failed", "err", err)
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// summaryCollector turns one Summary into the resource metrics, each
// stamped with the time its statistics were taken.
type summaryCollector struct {
	sum    *statsapi.Summary
	failed bool
}

func (c summaryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range resourceDescs {
		ch <- d
	}
}

func (c summaryCollector) Collect(ch chan<- prometheus.Metric) {
	failed := 0.0
	if c.failed || c.sum == nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
	if c.sum == nil {
		return
	}
	emit := func(d *prometheus.Desc, t prometheus.ValueType, at metav1.Time, v float64, labels ...string) {
		ch <- prometheus.NewMetricWithTimestamp(at.Time, prometheus.MustNewConstMetric(d, t, v, labels...))
	}
	cpu := func(d *prometheus.Desc, s *statsapi.CPUStats, labels ...string) {
		if s != nil && s.UsageCoreNanoSeconds != nil {
			emit(d, prometheus.CounterValue, s.Time, float64(*s.UsageCoreNanoSeconds)/float64(time.Second), labels...)
		}
	}
	mem := func(d *prometheus.Desc, s *statsapi.MemoryStats, labels ...string) {
		if s != nil && s.WorkingSetBytes != nil {
			emit(d, prometheus.GaugeValue, s.Time, float64(*s.WorkingSetBytes), labels...)
		}
	}
	cpu(nodeCPUDesc, c.sum.Node.CPU)
	mem(nodeMemDesc, c.sum.Node.Memory)
	for _, p := range c.sum.Pods {
		cpu(podCPUDesc, p.CPU, p.PodRef.Namespace, p.PodRef.Name)
		mem(podMemDesc, p.Memory, p.PodRef.Namespace, p.PodRef.Name)
		for _, ctr := range p.Containers {
			cpu(ctrCPUDesc, ctr.CPU, ctr.Name, p.PodRef.Namespace, p.PodRef.Name)
			mem(ctrMemDesc, ctr.Memory, ctr.Name, p.PodRef.Namespace, p.PodRef.Name)
			if !ctr.StartTime.IsZero() {
				ch <- prometheus.MustNewConstMetric(ctrStartDesc, prometheus.GaugeValue,
					float64(ctr.StartTime.UnixNano())/float64(time.Second), ctr.Name, p.PodRef.Namespace, p.PodRef.Name)
			}
		}
	}
}

// runningPods serves the pods that have a running container, as the
// runtime sees them: identity, containers and images only.
func (s *Server) runningPods(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Pods == nil {
		s.notEnabled(w, "pods")
		return
	}
	out := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []v1.Pod{}}
	for _, p := range s.cfg.Pods.Pods() {
		var ctrs []v1.Container
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Running != nil {
				ctrs = append(ctrs, v1.Container{Name: st.Name, Image: st.Image})
			}
		}
		if len(ctrs) == 0 {
			continue
		}
		out.Items = append(out.Items, v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Spec:       v1.PodSpec{Containers: ctrs},
		})
	}
	s.writeJSON(w, out)
}

// configz serves the configuration the agent runs with, in the kubelet's
// envelope.
func (s *Server) configz(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Configz == nil {
		s.notEnabled(w, "configz")
		return
	}
	s.writeJSON(w, map[string]any{"kubeletconfig": s.cfg.Configz})
}
