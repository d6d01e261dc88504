package hosts

import (
	"context"
	"fmt"
	"time"
)

// pollInterval is how often eventually looks again: booting takes under a
// second, so finer polling would only burn CPU on a small machine.
const pollInterval = 100 * time.Millisecond

// eventually polls cond until it holds, ctx ends (the error then says what
// was awaited and what cond last saw) or cond gives up with an error.
func eventually(ctx context.Context, what string, cond func() (done bool, seen string, err error)) error {
	last := ""
	for {
		done, seen, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		last = seen
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; last seen: %s", what, ctx.Err(), last)
		case <-time.After(pollInterval):
		}
	}
}
