// Package events records what happens to pods and the node as Kubernetes
// Events: a recorder hands them to a broadcaster, a correlator aggregates
// and rate-limits them, and sinks (the log, the local store, the API
// server) receive the result.
package events

import "k8s.io/apimachinery/pkg/runtime"

// Recorder is what every component uses to record an event about an
// object (a *v1.Pod or *v1.Node). eventtype is v1.EventTypeNormal or
// v1.EventTypeWarning; reason is the kubelet's word (Started, BackOff, ...).
type Recorder interface {
	Event(obj runtime.Object, eventtype, reason, message string)
	Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// Nop is a Recorder that drops everything; for tests that do not look at
// events.
type Nop struct{}

// Event implements Recorder.
func (Nop) Event(runtime.Object, string, string, string) {}

// Eventf implements Recorder.
func (Nop) Eventf(runtime.Object, string, string, string, ...any) {}

var _ Recorder = Nop{}
