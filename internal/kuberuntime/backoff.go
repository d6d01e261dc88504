package kuberuntime

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// backoff is a per-key exponential back-off in the kubelet's style: each
// failure doubles the delay up to max; an entry not touched for 2*max (a
// container that ran fine for 10 minutes) starts over.
type backoff struct {
	mu      sync.Mutex
	clock   clock.Clock
	initial time.Duration
	max     time.Duration
	entries map[string]*backoffEntry
}

type backoffEntry struct {
	delay      time.Duration
	lastUpdate time.Time
}

func newBackoff(c clock.Clock, initial, maxDelay time.Duration) *backoff {
	return &backoff{clock: c, initial: initial, max: maxDelay, entries: map[string]*backoffEntry{}}
}

func (b *backoff) expired(e *backoffEntry, eventTime time.Time) bool {
	return eventTime.Sub(e.lastUpdate) > 2*b.max
}

// inBackoffSince reports whether, counting from eventTime (when the
// container last finished), the key is still backing off, with the
// current delay and how much of it is left.
func (b *backoff) inBackoffSince(key string, eventTime time.Time) (delay, left time.Duration, in bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || b.expired(e, eventTime) {
		return 0, 0, false
	}
	left = e.delay - b.clock.Since(eventTime)
	return e.delay, left, left > 0
}

// inBackoffSinceUpdate is the same, counting from the last failure
// recorded with next (image pulls).
func (b *backoff) inBackoffSinceUpdate(key string) (left time.Duration, in bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || b.expired(e, b.clock.Now()) {
		return 0, false
	}
	left = e.delay - b.clock.Since(e.lastUpdate)
	return left, left > 0
}

// next records a failure at eventTime: the first (or first after a reset)
// waits initial, each further one twice as long, up to max.
func (b *backoff) next(key string, eventTime time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || b.expired(e, eventTime) {
		e = &backoffEntry{delay: b.initial}
		b.entries[key] = e
	} else {
		e.delay = min(2*e.delay, b.max)
	}
	e.lastUpdate = b.clock.Now()
}

func (b *backoff) reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

// gc forgets entries that have expired, so keys of deleted pods do not
// pile up.
func (b *backoff) gc() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for k, e := range b.entries {
		if b.expired(e, now) {
			delete(b.entries, k)
		}
	}
}
