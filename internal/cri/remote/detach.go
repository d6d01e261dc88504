package remote

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Calls that change the runtime's state (run or stop a sandbox, create,
// start or stop a container) are not cut short by their caller's context.
// A RunPodSandbox cancelled half-way makes containerd 1.6 give up on the
// shim it has just started without ending it ("failed to create shim
// task: context canceled"): a shim with no sandbox, running forever. The
// agent's end cancels every context it handed out, so such a call runs
// on a context that keeps the caller's values but not its cancellation,
// bounded by the call's own timeout. The caller stops waiting when its
// context ends (the agent's shutdown is not held up by a slow runtime);
// the call itself goes on, and Close waits for it, bounded by
// Config.DrainTimeout, before it closes the connection (a closed
// connection would cancel it too).

// DefaultDrainTimeout bounds how long Close waits for calls in flight.
const DefaultDrainTimeout = 10 * time.Second

// inflight counts the detached calls still running.
type inflight struct {
	mu      sync.Mutex
	closing bool
	calls   map[string]int // method → calls running
	wg      sync.WaitGroup
}

// begin registers a call; false once Close has begun (the call is not
// waited for: the connection is closing anyway).
func (f *inflight) begin(method string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[method]++
	f.wg.Add(1)
	return true
}

func (f *inflight) end(method string) {
	f.mu.Lock()
	f.calls[method]--
	if f.calls[method] == 0 {
		delete(f.calls, method)
	}
	f.mu.Unlock()
	f.wg.Done()
}

// running lists the calls still running, e.g. map[RunPodSandbox:1].
func (f *inflight) running() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.calls))
	for m, n := range f.calls {
		out[m] = n
	}
	return out
}

// drain refuses new calls and waits for the running ones until ctx ends.
// It reports whether they all finished.
func (f *inflight) drain(ctx context.Context) bool {
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// detached runs call for method on a context detached from ctx's
// cancellation and bounded by timeout. It returns call's result, or ctx's
// error as soon as ctx ends (the call then finishes on its own). A call
// whose ctx has already ended is not made.
func detached[T any](r *Runtime, ctx context.Context, method string, timeout time.Duration, call func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	if err := ctx.Err(); err != nil {
		var zero T // not begun: nothing half-made
		return zero, fmt.Errorf("%s: %w", method, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	tracked := r.inflight.begin(method)
	out := make(chan result, 1)
	go func() {
		defer cancel()
		if tracked {
			defer r.inflight.end(method)
		}
		v, err := call(cctx)
		out <- result{v, err}
	}()
	select {
	case res := <-out:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		select {
		case res := <-out: // finished meanwhile: its result is the truth
			return res.v, res.err
		default:
		}
		r.log.Info("caller gave up on a runtime call; it goes on until it returns", "method", method, "timeout", timeout)
		return zero, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// detachedErr is detached for a call that returns only an error.
func detachedErr(r *Runtime, ctx context.Context, method string, timeout time.Duration, call func(context.Context) error) error {
	_, err := detached(r, ctx, method, timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, call(ctx)
	})
	return err
}
