// Package backoff is the per-key exponential back-off of the kubelet's
// crash-loop and image-pull delays: each failure doubles the delay up to a
// maximum, and a key left alone for twice the maximum (a container that ran
// fine for ten minutes) starts over. The lifecycle core uses it for
// container restarts, the runtime manager for image pulls.
package backoff

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Backoff holds the delays of many keys. It is safe for concurrent use.
type Backoff struct {
	mu      sync.Mutex
	clock   clock.Clock
	initial time.Duration
	max     time.Duration
	entries map[string]*entry
}

type entry struct {
	delay      time.Duration
	lastUpdate time.Time
}

// New returns a back-off whose first delay is initial, doubling up to
// maxDelay, timed by c.
func New(c clock.Clock, initial, maxDelay time.Duration) *Backoff {
	return &Backoff{clock: c, initial: initial, max: maxDelay, entries: map[string]*entry{}}
}

func (b *Backoff) expired(e *entry, eventTime time.Time) bool {
	return eventTime.Sub(e.lastUpdate) > 2*b.max
}

// InBackoffSince reports whether, counting from eventTime (when the
// container last finished), the key is still backing off, with the
// current delay and how much of it is left.
func (b *Backoff) InBackoffSince(key string, eventTime time.Time) (delay, left time.Duration, in bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || b.expired(e, eventTime) {
		return 0, 0, false
	}
	left = e.delay - b.clock.Since(eventTime)
	return e.delay, left, left > 0
}

// InBackoffSinceUpdate is the same, counting from the last failure
// recorded with Next (image pulls).
func (b *Backoff) InBackoffSinceUpdate(key string) (left time.Duration, in bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || b.expired(e, b.clock.Now()) {
		return 0, false
	}
	left = e.delay - b.clock.Since(e.lastUpdate)
	return left, left > 0
}

// Next records a failure at eventTime: the first (or first after a reset)
// waits initial, each further one twice as long, up to max.
func (b *Backoff) Next(key string, eventTime time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || b.expired(e, eventTime) {
		e = &entry{delay: b.initial}
		b.entries[key] = e
	} else {
		e.delay = min(2*e.delay, b.max)
	}
	e.lastUpdate = b.clock.Now()
}

// Reset forgets key: its next failure waits the initial delay.
func (b *Backoff) Reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

// GC forgets entries that have expired, so keys of deleted pods do not
// pile up.
func (b *Backoff) GC() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for k, e := range b.entries {
		if b.expired(e, now) {
			delete(b.entries, k)
		}
	}
}
