package kuberuntime

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/backoff"
)

// errImagePullShown is the longest a failed pull's ErrImagePull stays in a
// pod's status before a sync shows the wait for the next attempt as
// ImagePullBackOff. The kubelet's pod worker retries a failed sync after
// about 10 s; here the switch comes at half the back-off, at most 10 s,
// so even the first 10 s wait shows both reasons, in the kubelet's order.
const errImagePullShown = 10 * time.Second

// pullBackoff is the image pull back-off of (pod, image) keys, with the
// error of each key's last failed pull, which the ImagePullBackOff message
// repeats so that the cause stays visible while the pull waits.
type pullBackoff struct {
	b *backoff.Backoff

	mu      sync.Mutex
	lastErr map[string]string
}

func newPullBackoff(clk clock.Clock) *pullBackoff {
	return &pullBackoff{b: backoff.New(clk, backoffInitial, backoffMax), lastErr: map[string]string{}}
}

// waiting reports whether key is backing off, how long is left, and the
// last pull's error.
func (p *pullBackoff) waiting(key string) (left time.Duration, lastErr string, in bool) {
	left, in = p.b.InBackoffSinceUpdate(key)
	if !in {
		return 0, "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return left, p.lastErr[key], true
}

// failed records a failed pull at now and returns when the pod should be
// synced again: soon enough that ErrImagePull gives way to
// ImagePullBackOff while the back-off runs.
func (p *pullBackoff) failed(key string, now time.Time, msg string) (requeue time.Duration) {
	p.b.Next(key, now)
	p.mu.Lock()
	p.lastErr[key] = msg
	p.mu.Unlock()
	left, _ := p.b.InBackoffSinceUpdate(key)
	return min(left/2, errImagePullShown)
}

// succeeded forgets key: its next failure starts the back-off over.
func (p *pullBackoff) succeeded(key string) {
	p.b.Reset(key)
	p.mu.Lock()
	delete(p.lastErr, key)
	p.mu.Unlock()
}

// GC forgets keys whose back-off expired (deleted pods' among them), and
// the errors of keys not waiting now (their next pull records a new one).
func (p *pullBackoff) GC() {
	p.b.GC()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.lastErr {
		if _, in := p.b.InBackoffSinceUpdate(k); !in {
			delete(p.lastErr, k)
		}
	}
}
