package metrics

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// series flattens a gathered registry into "name{label=value,...}" → value.
func series(t *testing.T, families []*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			switch {
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			default:
				out[key] = 0
			}
		}
	}
	return out
}

func TestNewKubeletExposesKubeletNames(t *testing.T) {
	reg := NewRegistry()
	k, err := NewKubelet(reg, "node1")
	if err != nil {
		t.Fatal(err)
	}
	k.RunningPods.Set(2)
	k.RunningContainers.WithLabelValues(ContainerStateRunning).Set(3)
	k.StartedContainers.WithLabelValues(ContainerTypeRegular).Inc()
	k.StartedContainersErrors.WithLabelValues(ContainerTypeInit, "RunContainerError").Inc()
	k.PodStartDuration.Observe(1.5)
	k.PodWorkerDuration.WithLabelValues("sync").Observe(0.01)
	k.RestartedPods.WithLabelValues("true").Inc()
	k.StartedPods.Inc()

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := series(t, fams)
	want := map[string]float64{
		"kubelet_running_pods{}":                                                                        2,
		"kubelet_running_containers{container_state=running}":                                           3,
		"kubelet_started_containers_total{container_type=container}":                                    1,
		"kubelet_started_containers_errors_total{code=RunContainerError,container_type=init_container}": 1,
		"kubelet_pod_start_duration_seconds{}":                                                          1,
		"kubelet_pod_worker_duration_seconds{operation=sync}":                                           1,
		"kubelet_restarted_pods_total{static=true}":                                                     1,
		"kubelet_started_pods_total{}":                                                                  1,
		"kubelet_node_name{node=node1}":                                                                 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got["go_goroutines{}"]; !ok {
		t.Error("go collector not registered: go_goroutines missing")
	}
	if _, ok := got["process_start_time_seconds{}"]; !ok {
		t.Error("process collector not registered: process_start_time_seconds missing")
	}
}

func TestNewKubeletTwiceOnOneRegistryFails(t *testing.T) {
	reg := NewRegistry()
	if _, err := NewKubelet(reg, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := NewKubelet(reg, "a"); err == nil {
		t.Fatal("registering the kubelet metrics twice should fail")
	}
}
