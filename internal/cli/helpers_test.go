package cli

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// syncWriter is a buffer shared by a command goroutine and the test.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitOutput polls, with a generous deadline, until w holds want.
func waitOutput(t *testing.T, w *syncWriter, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if w.String() == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out: output %q, want %q", w.String(), want)
}
