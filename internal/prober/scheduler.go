package prober

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// scheduler runs every worker's doProbe on its schedule from one goroutine
// with one timer (a heap ordered by due time), instead of one goroutine and
// one ticker per probe. Due probes are handed to a pool of runner
// goroutines that grows on demand up to maxInFlight and lives as long as
// the scheduler (reused runners have grown stacks and their own context, so
// a probe costs no stack copying and no contention on a shared context). A
// worker is never run twice at once: it leaves the heap while it runs and
// goes back with its next due time.
type scheduler struct {
	clock       clock.Clock
	run         func(context.Context, *worker) bool
	exited      func(*worker)
	lateness    func(time.Duration)
	maxInFlight int
	runners     int // owned by loop
	jobs        chan *worker
	wake        chan struct{}
	pool        sync.WaitGroup

	mu   sync.Mutex
	heap workerHeap
}

func newScheduler(clk clock.Clock, maxInFlight int, run func(context.Context, *worker) bool, exited func(*worker), lateness func(time.Duration)) *scheduler {
	return &scheduler{
		clock:       clk,
		run:         run,
		exited:      exited,
		lateness:    lateness,
		maxInFlight: maxInFlight,
		jobs:        make(chan *worker),
		wake:        make(chan struct{}, 1),
	}
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// add schedules w's first run at due.
func (s *scheduler) add(w *worker, due time.Time) {
	s.mu.Lock()
	s.pushLocked(w, due)
	s.mu.Unlock()
	s.poke()
}

// trigger makes w run as soon as possible (after its current run, if it is
// running now).
func (s *scheduler) trigger(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case w.cancelled:
	case w.running:
		w.triggered = true
	case w.queued:
		if now := s.clock.Now(); w.due.After(now) {
			s.pushLocked(w, now) // the old entry goes stale
			s.poke()
		}
	}
}

// cancel takes w out of the schedule for good; a run in progress finishes.
// Its heap entry goes stale and is dropped when it comes up.
func (s *scheduler) cancel(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.cancelled = true
	w.queued = false
	w.gen++
}

// pushLocked (re)schedules w at due; any entry already in the heap for w
// becomes stale. s.mu must be held.
func (s *scheduler) pushLocked(w *worker, due time.Time) {
	w.gen++
	w.due = due
	w.queued = true
	heap.Push(&s.heap, heapEntry{key: due.UnixNano(), gen: w.gen, w: w})
}

// loop dispatches due workers until ctx ends, then waits for the probes in
// flight.
func (s *scheduler) loop(ctx context.Context) {
	defer s.pool.Wait()
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w, wait := s.next()
		if w != nil {
			s.dispatch(ctx, w)
			continue
		}
		timer.Stop()
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timer.C():
		}
	}
}

// next pops a due worker, or says how long until the earliest one is due
// (0: nothing scheduled).
func (s *scheduler) next() (*worker, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for len(s.heap) > 0 {
		e := s.heap[0]
		w := e.w
		if e.gen != w.gen || !w.queued {
			heap.Pop(&s.heap) // stale: cancelled or rescheduled
			continue
		}
		if w.due.After(now) {
			return nil, w.due.Sub(now)
		}
		heap.Pop(&s.heap)
		w.queued = false
		w.running = true
		if s.lateness != nil {
			s.lateness(now.Sub(w.due))
		}
		return w, 0
	}
	return nil, 0
}

// dispatch hands w to an idle runner, starts a new one if all are busy and
// the pool may grow, or else waits for a runner to come free.
func (s *scheduler) dispatch(ctx context.Context, w *worker) {
	select {
	case s.jobs <- w:
		return
	default:
	}
	if s.runners < s.maxInFlight {
		s.runners++
		s.pool.Add(1)
		go s.runner(ctx, w)
		return
	}
	select {
	case s.jobs <- w:
	case <-ctx.Done():
	}
}

// runner executes the workers it is handed until ctx ends.
func (s *scheduler) runner(ctx context.Context, w *worker) {
	defer s.pool.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for {
		s.execute(ctx, w)
		select {
		case w = <-s.jobs:
		case <-ctx.Done():
			return
		}
	}
}

func (s *scheduler) execute(ctx context.Context, w *worker) {
	keep := s.run(ctx, w)
	if !keep {
		s.exited(w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w.running = false
	if w.cancelled || ctx.Err() != nil {
		return
	}
	now := s.clock.Now()
	next := w.due.Add(w.period)
	if w.triggered || next.Before(now) {
		// Triggered, or the probe overran its period: go again now, like
		// a ticker that has a tick waiting.
		next = now
	}
	w.triggered = false
	s.pushLocked(w, next)
	s.poke()
}

// workerHeap orders workers by due time. Entries carry their key and are
// never updated in place (a rescheduled or cancelled worker leaves a stale
// entry behind, dropped when it surfaces), so sifting through ten thousand
// entries touches only the slice, never the workers.
type workerHeap []heapEntry

type heapEntry struct {
	key int64  // due time as Unix nanoseconds
	gen uint64 // the worker's gen when pushed; stale when they differ
	w   *worker
}

func (h workerHeap) Len() int           { return len(h) }
func (h workerHeap) Less(i, j int) bool { return h[i].key < h[j].key }
func (h workerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *workerHeap) Push(x any)        { *h = append(*h, x.(heapEntry)) }
func (h *workerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = heapEntry{}
	*h = old[:len(old)-1]
	return e
}
