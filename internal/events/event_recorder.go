package events

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/minilet/minilet/internal/errdefs"
)

// Component is the event source component (and reporting controller)
// minilet reports: the kubelet's, which tools filter on.
const Component = "kubelet"

// EventRecorder runs each call through the correlator and, when it is to
// be written, builds the v1.Event and queues it on its broadcaster, never
// blocking. It implements Recorder and is safe for
// concurrent use.
type EventRecorder struct {
	b      *Broadcaster
	source v1.EventSource
	log    *slog.Logger
}

var _ Recorder = (*EventRecorder)(nil)

// NewRecorder returns a recorder whose events carry source (usually
// {Component: events.Component, Host: nodeName}).
func (b *Broadcaster) NewRecorder(source v1.EventSource) *EventRecorder {
	return &EventRecorder{b: b, source: source, log: b.log}
}

// Event records an event about obj (a *v1.Pod, *v1.Node, a
// *v1.ObjectReference such as ContainerRef's, or any object with metadata
// and a kind). Types other than Normal and Warning are logged and dropped.
func (r *EventRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.generate(obj, nil, metav1.Time{}, eventtype, reason, message)
}

// Eventf is Event with a Printf-style message.
func (r *EventRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.generate(obj, nil, metav1.Time{}, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations set on the event.
func (r *EventRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.generate(obj, annotations, metav1.Time{}, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// PastEventf is Eventf for something that happened at timestamp.
func (r *EventRecorder) PastEventf(obj runtime.Object, timestamp metav1.Time, eventtype, reason, messageFmt string, args ...any) {
	r.generate(obj, nil, timestamp, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *EventRecorder) generate(obj runtime.Object, annotations map[string]string, ts metav1.Time, eventtype, reason, message string) {
	if eventtype != v1.EventTypeNormal && eventtype != v1.EventTypeWarning {
		r.log.Error("unsupported event type, event dropped", "type", eventtype, "reason", reason, "message", message)
		return
	}
	ref, err := Reference(obj)
	if err != nil {
		r.log.Error("cannot reference object, event dropped", "reason", reason, "message", message, "err", err)
		return
	}
	if !r.b.admit() {
		return // shut down: counted as dropped
	}
	gk := groupKey{
		component: r.source.Component, host: r.source.Host,
		kind: ref.Kind, namespace: ref.Namespace, name: ref.Name, uid: string(ref.UID), apiVersion: ref.APIVersion,
		eventType: eventtype, reason: reason,
	}
	d := r.b.corr.decide(gk, ref.FieldPath, message, ts, "")
	if d.skip {
		r.b.recorded.Add(1)
		r.b.filter()
		return
	}
	if len(r.b.queue) >= cap(r.b.queue) { // full: count the drop without building the event
		r.b.recorded.Add(1)
		r.b.drop(1)
		r.b.warnBurst()
		return
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if d.combined {
		message = CombinedPrefix + message
		annotations = nil
	}
	ev := &v1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Annotations: annotations},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             message,
		Source:              r.source,
		Type:                eventtype,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}
	d.apply(ev)
	if pod, ok := obj.(*v1.Pod); ok && len(pod.Labels) > 0 {
		ev.Labels = make(map[string]string, len(pod.Labels))
		for k, v := range pod.Labels {
			ev.Labels[k] = v
		}
	}
	r.b.enqueue(queued{ev: ev, update: d.count > 1})
}

// Reference builds the involvedObject for obj. Pods and nodes need no
// TypeMeta; an *v1.ObjectReference is used as given.
func Reference(obj runtime.Object) (v1.ObjectReference, error) {
	switch o := obj.(type) {
	case nil:
		return v1.ObjectReference{}, fmt.Errorf("event object is nil: %w", errdefs.ErrInvalidArgument)
	case *v1.ObjectReference:
		if o == nil {
			return v1.ObjectReference{}, fmt.Errorf("event object reference is nil: %w", errdefs.ErrInvalidArgument)
		}
		return *o, nil
	case *v1.Pod:
		if o == nil {
			return v1.ObjectReference{}, fmt.Errorf("event object pod is nil: %w", errdefs.ErrInvalidArgument)
		}
		return v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: o.Namespace, Name: o.Name,
			UID: o.UID, ResourceVersion: o.ResourceVersion}, nil
	case *v1.Node:
		if o == nil {
			return v1.ObjectReference{}, fmt.Errorf("event object node is nil: %w", errdefs.ErrInvalidArgument)
		}
		return v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: o.Name, UID: o.UID,
			ResourceVersion: o.ResourceVersion}, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return v1.ObjectReference{}, fmt.Errorf("event object %T has no metadata: %w", obj, errdefs.ErrInvalidArgument)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		return v1.ObjectReference{}, fmt.Errorf("event object %T %q has no kind set: %w", obj, m.GetName(), errdefs.ErrInvalidArgument)
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	return v1.ObjectReference{Kind: kind, APIVersion: apiVersion, Namespace: m.GetNamespace(), Name: m.GetName(),
		UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}, nil
}

// ContainerRef references a container of pod the way the kubelet does, with
// fieldPath spec.containers{NAME} (or spec.initContainers{NAME}); pass it
// to Event as the object.
func ContainerRef(pod *v1.Pod, container string) *v1.ObjectReference {
	ref, _ := Reference(pod)
	path := "spec.containers{" + container + "}"
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == container {
			path = "spec.initContainers{" + container + "}"
			break
		}
	}
	ref.FieldPath = path
	return &ref
}

// nameSeq hands out the nanosecond suffixes of event names: the clock's
// time, or one more than the last suffix when the clock has not moved, so
// that two events never share a name (a coarse or fake clock would
// otherwise make a second event overwrite the first in the store).
type nameSeq struct{ last atomic.Int64 }

func (s *nameSeq) next(nanos int64) int64 {
	for {
		last := s.last.Load()
		if nanos <= last {
			nanos = last + 1
		}
		if s.last.CompareAndSwap(last, nanos) {
			return nanos
		}
	}
}

// eventName is "<object>.<unix nanos in hex>", or a UUID when that is not a
// valid object name (an object name with upper case, say).
func eventName(objName string, nanos int64) string {
	var stack [80]byte
	buf := stack[:0]
	if len(objName)+17 > len(stack) {
		buf = make([]byte, 0, len(objName)+17)
	}
	buf = append(buf, objName...)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, nanos, 16)
	if !isDNSSubdomain(buf) {
		return string(uuid.NewUUID())
	}
	return string(buf)
}

// isDNSSubdomain is a fast RFC 1123 subdomain check: at most 253
// characters, lower-case alphanumerics, '-' and '.', each label starting
// and ending with an alphanumeric.
func isDNSSubdomain(s []byte) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	prev := byte('.')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if prev == '.' {
				return false
			}
		case c == '.':
			if prev == '.' || prev == '-' {
				return false
			}
		default:
			return false
		}
		prev = c
	}
	return prev != '-' && prev != '.'
}
