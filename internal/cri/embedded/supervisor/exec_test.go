package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
)

// TestExecTimeoutCoversTheCommandOnly: entering the container is not part
// of an exec's timeout (a probe's timeout is the command's, as with the
// kubelet's runtimes): on a machine where set-up takes longer than the
// timeout, a quick command still succeeds, and a slow one still times out.
func TestExecTimeoutCoversTheCommandOnly(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	parent := "/minilet-test-exec-" + randomID()[:8]
	cg := testDriver(t)
	t.Cleanup(func() { _ = cg.Destroy(context.Background(), cgroups.Name{parent[1:]}) })
	s := openSupervisor(t, dir, testLog(t))
	defer s.Close()
	rec := looper(parent, "marker-"+randomID())
	rec.Env = []string{slowSetupEnv + "=1500ms"}
	if err := s.Create(rec); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Remove(context.Background(), rec.ID) }()
	if err := s.Start(rec.ID); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	began := time.Now()
	if _, _, err := s.Exec(ctx, rec.ID, []string{"sleep", "0.2"}, time.Second); err != nil {
		t.Fatalf("a 0.2 s command with a 1 s timeout after 1.5 s of set-up: %v; want success", err)
	}
	if took := time.Since(began); took < 1500*time.Millisecond {
		t.Fatalf("exec took %s: the slow set-up was not exercised", took)
	}
	began = time.Now()
	_, _, err := s.Exec(ctx, rec.ID, []string{"sleep", "30"}, time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a 30 s command with a 1 s timeout: %v; want a timeout", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Fatalf("the timed-out command was given %s", took)
	}
	// A cancelled context still ends an exec still setting up.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, _, err := s.Exec(cctx, rec.ID, []string{"true"}, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec with a context ending during set-up: %v; want the context's error", err)
	}
}
