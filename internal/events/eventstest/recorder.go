// Package eventstest is a Recorder for tests: it keeps every event as a
// "Type Reason Message" line for assertions.
package eventstest

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
)

// Recorder keeps events. Safe for concurrent use; the zero value is ready.
type Recorder struct {
	mu     sync.Mutex
	events []string
}

// Event records one event.
func (r *Recorder) Event(_ runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, eventtype+" "+reason+" "+message)
}

// Eventf records one event with a formatted message.
func (r *Recorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

// Events returns the events so far, oldest first.
func (r *Recorder) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// Count is how many events contain sub.
func (r *Recorder) Count(sub string) int {
	n := 0
	for _, e := range r.Events() {
		if strings.Contains(e, sub) {
			n++
		}
	}
	return n
}

// Has reports whether an event contains sub.
func (r *Recorder) Has(sub string) bool { return r.Count(sub) > 0 }

// String lists the events, one a line.
func (r *Recorder) String() string { return strings.Join(r.Events(), "\n") }
