package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minilet/minilet/internal/errdefs"
)

// destroyTimeout caps Destroy when the caller's context has no deadline.
const destroyTimeout = 30 * time.Second

// killAndRemove SIGKILLs whatever pids() returns until it returns none and
// remove() succeeds, backing off between rounds. The agent itself (and pid
// 1) are never signalled, so a misplaced agent cannot kill itself.
func killAndRemove(ctx context.Context, clk Clock, what string, pids func() ([]int, error), remove func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, destroyTimeout)
		defer cancel()
	}
	wait := time.Millisecond
	var lastErr error
	for {
		ps, err := pids()
		if err != nil {
			return fmt.Errorf("list processes of cgroup %s: %w", what, err)
		}
		ps = killable(ps)
		if len(ps) == 0 {
			if lastErr = remove(); lastErr == nil {
				return nil
			}
		} else {
			sort.Ints(ps)
			lastErr = fmt.Errorf("%d processes left (first %d)", len(ps), ps[0])
			if err := killPids(ps); err != nil {
				lastErr = err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove cgroup %s: %w (%w): %w", what, lastErr, ctx.Err(), errdefs.ErrUnavailable)
		case <-clk.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// killTree is Kill: SIGKILL to the processes of n and its descendants.
func killTree(n Name, pids func(Name) ([]int, error)) error {
	if len(n) == 0 {
		return fmt.Errorf("refusing to kill the root cgroup: %w", errdefs.ErrInvalidArgument)
	}
	ps, err := pids(n)
	if err != nil {
		return err
	}
	return killPids(ps)
}

// killPids sends SIGKILL to the killable pids of ps; a process that is
// already gone is no error.
func killPids(ps []int) error {
	var errs []error
	for _, p := range killable(ps) {
		if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// killable drops the caller and pid 1 from ps (in place).
func killable(ps []int) []int {
	self := os.Getpid()
	out := ps[:0]
	for _, p := range ps {
		if p != self && p != 1 {
			out = append(out, p)
		}
	}
	return out
}
