package cluster

import (
	"context"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/minilet/minilet/internal/events"
)

// EventSink writes events to the API server: a new event is created, a
// repeat of one (the correlator's Update) patches its count, last
// timestamp and message. Requests are rate-limited by eventRecordQPS and
// eventBurst (a client of its own), and errors carry errdefs classes so an
// events.RetryWriter knows what to retry.
type EventSink struct {
	client kubernetes.Interface
}

var _ events.Sink = (*EventSink)(nil)

// Create implements events.Sink.
func (s *EventSink) Create(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	ev = ev.DeepCopy()
	ev.ResourceVersion = ""
	if ev.Namespace == "" {
		ev.Namespace = metav1.NamespaceDefault
	}
	got, err := s.client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		return nil, classify(err, "creating event "+ev.Namespace+"/"+ev.Name)
	}
	return got, nil
}

// Update implements events.Sink: it patches what changes when an event
// repeats. An event the API server no longer has fails with
// errdefs.ErrNotFound.
func (s *EventSink) Update(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	ns := ev.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	patch, err := json.Marshal(map[string]any{
		"count":         ev.Count,
		"lastTimestamp": ev.LastTimestamp,
		"message":       ev.Message,
	})
	if err != nil {
		return nil, err
	}
	got, err := s.client.CoreV1().Events(ns).Patch(ctx, ev.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, classify(err, "patching event "+ns+"/"+ev.Name)
	}
	return got, nil
}
