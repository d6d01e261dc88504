// Package testutil holds what tests of several packages share.
package testutil

import (
	"testing"
	"time"
)

// Deadline is how long WaitFor waits: generous, for small CI machines
// running packages in parallel.
const Deadline = time.Minute

// WaitFor polls cond until it holds, failing the test after Deadline with
// what it was waiting for.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, Deadline)
		}
		time.Sleep(time.Millisecond)
	}
}
