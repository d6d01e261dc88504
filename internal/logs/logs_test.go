package logs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

var t0 = time.Date(2026, 11, 22, 5, 0, 0, 123456789, time.UTC)

func line(sec int, stream, tag, content string) string {
	return fmt.Sprintf("%s %s %s %s\n", t0.Add(time.Duration(sec)*time.Second).Format(time.RFC3339Nano), stream, tag, content)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string, opts Options) string {
	t.Helper()
	var buf bytes.Buffer
	if err := ReadLogs(context.Background(), path, opts, &buf); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	return buf.String()
}

func TestReadLogsOptions(t *testing.T) {
	content := line(0, Stdout, "F", "one") +
		line(1, Stderr, "F", "two") +
		"garbage that is not CRI\n" +
		line(2, Stdout, "P", "thr") +
		line(3, Stderr, "F", "interleaved") +
		line(4, Stdout, "P", "e") +
		line(5, Stdout, "F", "e!") +
		line(6, Stdout, "F", "") +
		line(7, Stdout, "F", "last with  spaces")
	path := writeFile(t, content)
	ts := func(sec int) string { return t0.Add(time.Duration(sec) * time.Second).Format(time.RFC3339Nano) }

	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"all", Options{}, "one\ntwo\ninterleaved\nthree!\n\nlast with  spaces\n"},
		{"tail 2", Options{TailLines: Tail(2)}, "\nlast with  spaces\n"},
		{"tail 0", Options{TailLines: Tail(0)}, ""},
		{"tail more than there is", Options{TailLines: Tail(100)}, "one\ntwo\ninterleaved\nthree!\n\nlast with  spaces\n"},
		{"timestamps use the first partial's time", Options{TailLines: Tail(3), Timestamps: true},
			ts(2) + " three!\n" + ts(6) + " \n" + ts(7) + " last with  spaces\n"},
		{"since", Options{Since: t0.Add(3 * time.Second)}, "interleaved\n\nlast with  spaces\n"},
		{"limit bytes cuts mid-message", Options{LimitBytes: 6}, "one\ntw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := read(t, path, tt.opts); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadLogsMissingFileIsNotFound(t *testing.T) {
	err := ReadLogs(context.Background(), filepath.Join(t.TempDir(), "nope.log"), Options{}, &bytes.Buffer{})
	if !errdefs.IsNotFound(err) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestParseLineRejectsBadLines(t *testing.T) {
	for _, l := range []string{"", "x stdout F a", t0.Format(time.RFC3339Nano) + " stdin F a", t0.Format(time.RFC3339Nano) + " stdout X a"} {
		if _, _, _, _, err := ParseLine([]byte(l)); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseLine(%q) = %v, want ErrInvalidArgument", l, err)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a reader goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls until the buffer holds want, with a generous deadline.
func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b.String() == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out: got %q, want %q", b.String(), want)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// startFollow runs ReadLogs with Follow in a goroutine and returns the
// output buffer and a stop function that cancels and waits for it.
func startFollow(t *testing.T, path string, opts Options) (*syncBuffer, func() error) {
	t.Helper()
	opts.Follow = true
	opts.PollInterval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- ReadLogs(ctx, path, opts, out) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("ReadLogs did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return out, stop
}

func TestFollowSeesAppendsAndJoinsSplitWrites(t *testing.T) {
	path := writeFile(t, line(0, Stdout, "F", "a")+line(1, Stdout, "F", "b"))
	out, stop := startFollow(t, path, Options{TailLines: Tail(1)})
	waitFor(t, out, "b\n")

	// A writer appends lines, one of them in two writes that split it in the
	// middle, and a partial message completed later.
	l := line(2, Stdout, "F", "split line")
	appendTo(t, path, l[:10])
	appendTo(t, path, l[10:])
	appendTo(t, path, line(3, Stderr, "P", "part "))
	waitFor(t, out, "b\nsplit line\n")
	appendTo(t, path, line(4, Stderr, "F", "done"))
	waitFor(t, out, "b\nsplit line\npart done\n")

	if err := stop(); err != nil {
		t.Fatalf("follow returned %v after cancel, want nil", err)
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	path := writeFile(t, line(0, Stdout, "F", "old-1"))
	out, stop := startFollow(t, path, Options{})
	waitFor(t, out, "old-1\n")

	// Rotate: a last line goes to the old file, which is renamed away, and a
	// new file is created under the same name.
	appendTo(t, path, line(1, Stdout, "F", "old-2"))
	if err := os.Rename(path, path+".20261122-050000"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, line(2, Stdout, "F", "new-1"))
	waitFor(t, out, "old-1\nold-2\nnew-1\n")
	appendTo(t, path, line(3, Stdout, "F", "new-2"))
	waitFor(t, out, "old-1\nold-2\nnew-1\nnew-2\n")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestFollowAfterTruncation(t *testing.T) {
	path := writeFile(t, line(0, Stdout, "F", "before truncation, a long line"))
	out, stop := startFollow(t, path, Options{})
	waitFor(t, out, "before truncation, a long line\n")
	if err := os.WriteFile(path, []byte(line(1, Stdout, "F", "after")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "before truncation, a long line\nafter\n")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestFollowStopsAtLimitBytes(t *testing.T) {
	path := writeFile(t, line(0, Stdout, "F", "abc"))
	opts := Options{Follow: true, LimitBytes: 6, PollInterval: 20 * time.Millisecond}
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- ReadLogs(context.Background(), path, opts, out) }()
	waitFor(t, out, "abc\n")
	appendTo(t, path, line(1, Stdout, "F", "defgh"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follow did not stop at the byte limit")
	}
	if got := out.String(); got != "abc\nde" {
		t.Fatalf("got %q", got)
	}
}

func BenchmarkReadLogsTail(b *testing.B) {
	var sb strings.Builder
	for i := range 100000 {
		sb.WriteString(line(i, Stdout, "F", "some log line of moderate length for the benchmark"))
	}
	path := filepath.Join(b.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(sb.Len()))
	for b.Loop() {
		var buf bytes.Buffer
		if err := ReadLogs(context.Background(), path, Options{TailLines: Tail(100)}, &buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFollowEndsWhenContainerIsDone(t *testing.T) {
	path := writeFile(t, line(0, Stdout, "F", "a"))
	var mu sync.Mutex
	exited := false
	opts := Options{Follow: true, PollInterval: 20 * time.Millisecond, Done: func() bool {
		mu.Lock()
		defer mu.Unlock()
		return exited
	}}
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- ReadLogs(context.Background(), path, opts, out) }()
	waitFor(t, out, "a\n")
	appendTo(t, path, line(1, Stdout, "F", "last words"))
	mu.Lock()
	exited = true
	mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follow did not end after the container exited")
	}
	if got := out.String(); got != "a\nlast words\n" {
		t.Fatalf("got %q, want the last line written before the exit too", got)
	}
}

// A container's last output without a newline is a P line no F line ends
// (containerd writes it so): it is written as it is, without a newline,
// by a read that ends there, and counts as a message for tail.
func TestReadLogsWritesTheUnterminatedEnd(t *testing.T) {
	path := writeFile(t, line(0, Stdout, "F", "one")+line(1, Stderr, "P", "err ")+line(2, Stdout, "P", "DO")+line(3, Stdout, "P", "NE")+line(4, Stderr, "P", "end"))
	for _, tt := range []struct {
		name string
		opts Options
		want string
	}{
		{"all", Options{}, "one\nerr endDONE"},
		{"tail 1", Options{TailLines: Tail(1)}, "DONE"},
		{"tail 2", Options{TailLines: Tail(2)}, "err endDONE"},
		{"tail 3", Options{TailLines: Tail(3)}, "one\nerr endDONE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := read(t, path, tt.opts); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	// Following the log of a container that exited writes it too.
	out := &bytes.Buffer{}
	opts := Options{Follow: true, Done: func() bool { return true }}
	if err := ReadLogs(context.Background(), path, opts, out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "one\nerr endDONE"; got != want {
		t.Errorf("follow of an exited container: got %q, want %q", got, want)
	}
}
