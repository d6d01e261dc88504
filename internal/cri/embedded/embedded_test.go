package embedded

import (
	"context"
	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
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
	code := m.Run()
	removeSmallMonitor()
	os.Exit(code)
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
	return newTestRuntimeWith(tb, Config{RootDir: root})
}

// newTestRuntimeWith is newTestRuntime with more configuration.
func newTestRuntimeWith(tb testing.TB, cfg Config) *Runtime {
	tb.Helper()
	cfg.Logger = testLogger(tb)
	if cfg.CNIConfDir == "" {
		cfg.CNIConfDir, cfg.CNIBinDirs = tb.TempDir(), []string{podnettest.BinDir(tb)}
	}
	r, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func TestConformance(t *testing.T) {
	requireRoot(t)
	runConformance(t, "")
}

// runConformance runs the CRI conformance suite with monitors started from
// monitorPath ("" for a re-exec of the test binary).
func runConformance(t *testing.T, monitorPath string) {
	open := func(t *testing.T, root string) *Runtime {
		return newTestRuntimeWith(t, Config{RootDir: root, MonitorPath: monitorPath})
	}
	conformance.Run(t, func(t *testing.T) conformance.RuntimeUnderTest {
		return open(t, t.TempDir())
	}, conformance.WithRestart(func(t *testing.T, old conformance.RuntimeUnderTest, whileDown func()) conformance.RuntimeUnderTest {
		r := old.(*Runtime)
		root := r.stateDir[:len(r.stateDir)-len("/runtime")]
		if err := r.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		whileDown()
		return open(t, root)
	}))
}
