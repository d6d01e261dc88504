package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// destroyTimeout caps Destroy when the caller's context has no deadline.
const destroyTimeout = 30 * time.Second

// killAndRemove SIGKILLs whatever pids() returns until it returns none and
// remove() succeeds, backing off between rounds. The agent itself (and pid
// 1) are never signalled, so a misplaced agent cannot kill itself.
func killAndRemove(ctx context.Context, clk clock.Clock, what string, pids func() ([]int, error), remove func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, destroyTimeout)
		defer cancel()
	}
	self := os.Getpid()
	wait := time.Millisecond
	var lastErr error
	for {
		ps, err := pids()
		if err != nil {
			return fmt.Errorf("list processes of cgroup %s: %w", what, err)
		}
		ps = dropPid(dropPid(ps, self), 1)
		if len(ps) == 0 {
			if lastErr = remove(); lastErr == nil {
				return nil
			}
		} else {
			sort.Ints(ps)
			lastErr = fmt.Errorf("%d processes left (first %d)", len(ps), ps[0])
			for _, p := range ps {
				if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
					lastErr = fmt.Errorf("kill %d: %w", p, err)
				}
			}
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("remove cgroup %s: %w (%w): %w", what, lastErr, ctx.Err(), errdefs.ErrUnavailable)
		case <-t.C():
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

func dropPid(ps []int, pid int) []int {
	out := ps[:0]
	for _, p := range ps {
		if p != pid {
			out = append(out, p)
		}
	}
	return out
}
