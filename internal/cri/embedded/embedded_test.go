package embedded

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/minilet/minilet/internal/cri/conformance"
)

func TestMain(m *testing.M) {
	MaybeRunMonitor()
	if root := os.Getenv(helperAgentEnv); root != "" {
		os.Exit(runHelperAgent(root))
	}
	os.Exit(m.Run())
}

// testLogger routes the runtime's logs to t.Log (or nowhere in benchmarks).
func testLogger(tb testing.TB) *slog.Logger {
	if _, ok := tb.(*testing.B); ok {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ tb testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p))
	return len(p), nil
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (cgroups); CI runs as root")
	}
}

// newTestRuntime opens a runtime on root; it is closed when the test ends.
// Callers remove their sandboxes (which kills the containers) themselves.
func newTestRuntime(tb testing.TB, root string) *Runtime {
	tb.Helper()
	r, err := New(Config{RootDir: root, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func TestConformance(t *testing.T) {
	requireRoot(t)
	conformance.Run(t, func(t *testing.T) conformance.RuntimeUnderTest {
		return newTestRuntime(t, t.TempDir())
	}, conformance.WithRestart(func(t *testing.T, old conformance.RuntimeUnderTest, whileDown func()) conformance.RuntimeUnderTest {
		r := old.(*Runtime)
		root := r.stateDir[:len(r.stateDir)-len("/runtime")]
		if err := r.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		whileDown()
		return newTestRuntime(t, root)
	}))
}
