package agent

import (
	"context"
	"sync"
)

// background owns the agent's goroutines: each runs until the agent's
// context ends, and stop waits for all of them.
type background struct {
	ctx context.Context
	wg  sync.WaitGroup
}

func newBackground(ctx context.Context) *background { return &background{ctx: ctx} }

// run runs f(ctx) on a goroutine of its own.
func (b *background) run(f func(ctx context.Context)) {
	b.wg.Add(1)
	go func() { defer b.wg.Done(); f(b.ctx) }()
}

// onStop calls f once the agent's context ends (a subsystem's Stop).
func (b *background) onStop(f func()) {
	b.run(func(ctx context.Context) { <-ctx.Done(); f() })
}

// stop ends the context (cancel) and waits for every goroutine.
func (b *background) stop(cancel context.CancelFunc) {
	cancel()
	b.wg.Wait()
}
