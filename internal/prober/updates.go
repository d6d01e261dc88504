package prober

import (
	"context"
	"sync"
)

// updateQueue hands Updates to the sync loop without ever blocking a
// probe: pushes queue up, and one goroutine delivers them in order.
type updateQueue struct {
	out    chan Update
	signal chan struct{}

	mu    sync.Mutex
	items []Update
}

func newUpdateQueue() *updateQueue {
	return &updateQueue{out: make(chan Update), signal: make(chan struct{}, 1)}
}

func (q *updateQueue) push(u Update) {
	q.mu.Lock()
	q.items = append(q.items, u)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *updateQueue) pop() (Update, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return Update{}, false
	}
	u := q.items[0]
	q.items[0] = Update{}
	q.items = q.items[1:]
	return u, true
}

// run delivers queued updates until ctx ends.
func (q *updateQueue) run(ctx context.Context) {
	for {
		u, ok := q.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-q.signal:
			}
			continue
		}
		select {
		case q.out <- u:
		case <-ctx.Done():
			return
		}
	}
}
