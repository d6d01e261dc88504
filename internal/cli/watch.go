package cli

import (
	"context"
	"sort"
	"time"
)

// DefaultWatchInterval is how often `get -w` polls the agent, which
// offers no watch of its own.
const DefaultWatchInterval = time.Second

func (e *env) watchInterval() time.Duration {
	if e.opts.WatchInterval > 0 {
		return e.opts.WatchInterval
	}
	return DefaultWatchInterval
}

// watch polls list every interval until ctx ends and prints, in the
// order list returns them, the items that are new or whose state changed
// since the last poll; an item that is gone is printed once more with its
// last known state, as a watch's DELETED event is. seen is what was
// already printed.
func watch[T any](ctx context.Context, interval time.Duration, seen []T, list func(context.Context) ([]T, error),
	state func(*T) (id, state string), print func([]T) error) error {
	last := map[string]string{}
	lastItem := map[string]T{}
	for i := range seen {
		id, st := state(&seen[i])
		last[id], lastItem[id] = st, seen[i]
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		items, err := list(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var changed []T
		now := map[string]bool{}
		for i := range items {
			id, st := state(&items[i])
			now[id] = true
			if prev, ok := last[id]; !ok || prev != st {
				changed = append(changed, items[i])
			}
			last[id], lastItem[id] = st, items[i]
		}
		var gone []string
		for id := range lastItem {
			if !now[id] {
				gone = append(gone, id)
			}
		}
		sort.Strings(gone)
		for _, id := range gone {
			changed = append(changed, lastItem[id])
			delete(last, id)
			delete(lastItem, id)
		}
		if err := print(changed); err != nil {
			return err
		}
	}
}
