package cgroups

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a workload process: it waits for
// one byte on stdin (sent once the test has moved it into its cgroup) and
// then spins ("spin") or allocates and touches 100 MiB ("alloc").
const helperEnv = "MINILET_CGROUPS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "spin":
		waitGo()
		for {
			spinSink++
		}
	case "alloc":
		waitGo()
		const size = 100 << 20
		buf := make([]byte, size)
		for i := 0; i < size; i += 4096 {
			buf[i] = 1
		}
		os.Exit(int(buf[size-4096]) - 1)
	}
	os.Exit(m.Run())
}

var spinSink uint64

func waitGo() {
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		os.Exit(3)
	}
}

// workload is a helper process and the result of waiting for it.
type workload struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error
}

func startWorkload(t *testing.T, mode string) *workload {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &workload{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { w.err = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
	})
	return w
}

func (w *workload) release(t *testing.T) {
	t.Helper()
	if _, err := w.stdin.Write([]byte{1}); err != nil {
		t.Fatalf("release workload: %v", err)
	}
}

func (w *workload) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(60 * time.Second):
		t.Fatal("workload did not exit within 60s")
		return nil
	}
}

// requireV1 skips unless the test runs as root on a cgroup v1 machine.
func requireV1(t *testing.T) Driver {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real cgroups")
	}
	if m, err := Detect(DefaultMountRoot); err != nil || m != ModeV1 {
		t.Skipf("needs cgroup v1 hierarchies at %s (detected %v, %v)", DefaultMountRoot, m, err)
	}
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// testRoot returns a unique top-level cgroup name for the test and removes
// it (killing anything left) when the test ends.
func testRoot(t *testing.T, d Driver) Name {
	t.Helper()
	root := Name{"minilet-test-" + strconv.Itoa(os.Getpid()) + "-" + unsafeChars.ReplaceAllString(t.Name(), "_")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Destroy(ctx, root); err != nil {
			t.Errorf("cleanup %v: %v", root, err)
		}
	})
	return root
}

func readFile(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }
