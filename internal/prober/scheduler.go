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
// one ticker per probe. A due probe runs in its own short-lived goroutine;
// at most maxInFlight run at once. A worker is never run twice at once: it
// leaves the heap while it runs and goes back with its next due time.
type scheduler struct {
	clock    clock.Clock
	run      func(context.Context, *worker) bool
	exited   func(*worker)
	lateness func(time.Duration)
	slots    chan struct{}
	wake     chan struct{}
	inflight sync.WaitGroup

	mu   sync.Mutex
	heap workerHeap
}

func newScheduler(clk clock.Clock, maxInFlight int, run func(context.Context, *worker) bool, exited func(*worker), lateness func(time.Duration)) *scheduler {
	return &scheduler{
		clock:    clk,
		run:      run,
		exited:   exited,
		lateness: lateness,
		slots:    make(chan struct{}, maxInFlight),
		wake:     make(chan struct{}, 1),
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
	w.due = due
	heap.Push(&s.heap, w)
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
	case w.index >= 0:
		if now := s.clock.Now(); w.due.After(now) {
			w.due = now
			heap.Fix(&s.heap, w.index)
			s.poke()
		}
	}
}

// cancel takes w out of the schedule for good; a run in progress finishes.
func (s *scheduler) cancel(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.cancelled = true
	if w.index >= 0 {
		heap.Remove(&s.heap, w.index)
	}
}

// loop dispatches due workers until ctx ends, then waits for the probes in
// flight.
func (s *scheduler) loop(ctx context.Context) {
	defer s.inflight.Wait()
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w, wait := s.next()
		if w != nil {
			select {
			case s.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			s.inflight.Add(1)
			go s.execute(ctx, w)
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
	if len(s.heap) == 0 {
		return nil, 0
	}
	now := s.clock.Now()
	w := s.heap[0]
	if w.due.After(now) {
		return nil, w.due.Sub(now)
	}
	heap.Pop(&s.heap)
	w.running = true
	if s.lateness != nil {
		s.lateness(now.Sub(w.due))
	}
	return w, 0
}

func (s *scheduler) execute(ctx context.Context, w *worker) {
	defer s.inflight.Done()
	keep := s.run(ctx, w)
	<-s.slots
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
	w.due = next
	heap.Push(&s.heap, w)
	s.poke()
}

// workerHeap orders workers by due time.
type workerHeap []*worker

func (h workerHeap) Len() int           { return len(h) }
func (h workerHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h workerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *workerHeap) Push(x any) {
	w := x.(*worker)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *workerHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
