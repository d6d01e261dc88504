// Package metrics builds the agent's Prometheus registry and holds the
// sync-loop and pod metrics under the kubelet's metric names, so existing
// dashboards and alerts keep working against minilet.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Subsystem is the prefix every kubelet metric carries.
const Subsystem = "kubelet"

// Container types used as the container_type label, as the kubelet uses them.
const (
	ContainerTypeInit      = "init_container"
	ContainerTypeRegular   = "container"
	ContainerTypeEphemeral = "ephemeral_container"
)

// Container states used as the container_state label of RunningContainers.
const (
	ContainerStateCreated = "created"
	ContainerStateRunning = "running"
	ContainerStateExited  = "exited"
	ContainerStateUnknown = "unknown"
)

// NewRegistry returns a registry with the process and Go runtime collectors
// registered. Components register their own collectors on it.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	return reg
}

// Kubelet holds the sync-loop and pod metrics the agent updates. Build it
// with NewKubelet; every field is safe for concurrent use.
type Kubelet struct {
	// RunningPods is kubelet_running_pods: pods with a running sandbox.
	RunningPods prometheus.Gauge
	// RunningContainers is kubelet_running_containers{container_state}.
	RunningContainers *prometheus.GaugeVec
	// PodStartDuration is kubelet_pod_start_duration_seconds: from the agent
	// first seeing a pod to all its containers having started.
	PodStartDuration prometheus.Histogram
	// PodWorkerDuration is kubelet_pod_worker_duration_seconds{operation}
	// with operation one of "create", "update", "sync".
	PodWorkerDuration *prometheus.HistogramVec
	// RestartedPods is kubelet_restarted_pods_total{static}: pods whose
	// sandbox was recreated ("true" for static pods, "" otherwise).
	RestartedPods *prometheus.CounterVec
	// StartedContainers is kubelet_started_containers_total{container_type}.
	StartedContainers *prometheus.CounterVec
	// StartedContainersErrors is
	// kubelet_started_containers_errors_total{container_type,code}, code
	// being the error class or CRI status code of the failed start.
	StartedContainersErrors *prometheus.CounterVec
	// StartedPods is kubelet_started_pods_total.
	StartedPods prometheus.Counter
	// StartedPodsErrors is kubelet_started_pods_errors_total.
	StartedPodsErrors prometheus.Counter
	// NodeName is kubelet_node_name{node}, always 1.
	NodeName *prometheus.GaugeVec
}

// NewKubelet creates the kubelet metrics and registers them on reg. The
// node name is set at once on kubelet_node_name.
func NewKubelet(reg prometheus.Registerer, nodeName string) (*Kubelet, error) {
	k := &Kubelet{
		RunningPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: Subsystem, Name: "running_pods",
			Help: "Number of pods that have a running pod sandbox.",
		}),
		RunningContainers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem, Name: "running_containers",
			Help: "Number of containers currently running, by state.",
		}, []string{"container_state"}),
		PodStartDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: Subsystem, Name: "pod_start_duration_seconds",
			Help:    "Duration in seconds from the agent seeing a pod for the first time to the pod starting to run.",
			Buckets: []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600},
		}),
		PodWorkerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem, Name: "pod_worker_duration_seconds",
			Help:    "Duration in seconds to sync a single pod, by operation type: create, update, or sync.",
			Buckets: prometheus.DefBuckets,
		}, []string{"operation"}),
		RestartedPods: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "restarted_pods_total",
			Help: "Number of pods that have been restarted because they were deleted and recreated with the same UID.",
		}, []string{"static"}),
		StartedContainers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "started_containers_total",
			Help: "Cumulative number of containers started.",
		}, []string{"container_type"}),
		StartedContainersErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "started_containers_errors_total",
			Help: "Cumulative number of errors when starting containers.",
		}, []string{"container_type", "code"}),
		StartedPods: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "started_pods_total",
			Help: "Cumulative number of pods started.",
		}),
		StartedPodsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "started_pods_errors_total",
			Help: "Cumulative number of errors when starting pods.",
		}),
		NodeName: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem, Name: "node_name",
			Help: "The node's name. The count is always 1.",
		}, []string{"node"}),
	}
	for _, c := range []prometheus.Collector{
		k.RunningPods, k.RunningContainers, k.PodStartDuration, k.PodWorkerDuration,
		k.RestartedPods, k.StartedContainers, k.StartedContainersErrors,
		k.StartedPods, k.StartedPodsErrors, k.NodeName,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	k.NodeName.WithLabelValues(nodeName).Set(1)
	return k, nil
}

// ObserveSync records one pod worker step (op: "sync", "kill", ...) on
// kubelet_pod_worker_duration_seconds.
func (k *Kubelet) ObserveSync(op string, d time.Duration) {
	k.PodWorkerDuration.WithLabelValues(op).Observe(d.Seconds())
}

// ObservePodStart records a pod's start latency on
// kubelet_pod_start_duration_seconds.
func (k *Kubelet) ObservePodStart(d time.Duration) { k.PodStartDuration.Observe(d.Seconds()) }

// SetCounts sets kubelet_running_pods and kubelet_running_containers.
func (k *Kubelet) SetCounts(runningPods int, containers map[string]int) {
	k.RunningPods.Set(float64(runningPods))
	for state, n := range containers {
		k.RunningContainers.WithLabelValues(state).Set(float64(n))
	}
}
