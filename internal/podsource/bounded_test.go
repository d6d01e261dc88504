package podsource

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/boundedread"
	"github.com/minilet/minilet/internal/errdefs"
)

// A manifest that listFiles saw as a regular file and that is then swapped
// for something else before it is read is refused with an error naming the
// file and the reason; nothing blocks, nothing reads without end.
func TestFileSourceRefusesAManifestSwappedAfterTheListing(t *testing.T) {
	for _, tc := range []struct {
		name string
		swap func(t *testing.T, path string)
		want string
	}{
		{"symlink to /dev/zero", func(t *testing.T, path string) { replaceWithSymlink(t, path, "/dev/zero") },
			"not a regular file: a character device"},
		{"FIFO", func(t *testing.T, path string) {
			remove(t, path)
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file: a named pipe (FIFO)"},
		{"directory", func(t *testing.T, path string) {
			remove(t, path)
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file: a directory"},
		{"oversize file", func(t *testing.T, path string) {
			write(t, path, podYAML("web", "sleep 60")+"# "+strings.Repeat("x", MaxManifestSize)+"\n")
		}, "larger than the limit of 10 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			web := filepath.Join(dir, "web.yaml")
			write(t, web, podYAML("web", "sleep 60"))
			var sink errSink
			s, err := NewFile(FileConfig{NodeName: node, Path: dir, Clock: clocktesting.NewFakeClock(time.Now()),
				Logger: testLogger(t), OnError: sink.on})
			if err != nil {
				t.Fatal(err)
			}
			s.Step()
			if got := names((<-s.Updates()).Pods); got != "web-node1" {
				t.Fatalf("first snapshot = %s", got)
			}

			files, err := s.listFiles()
			if err != nil || len(files) != 1 || files[0] != web {
				t.Fatalf("listFiles = %v, %v", files, err)
			}
			tc.swap(t, web) // between the listing and the read
			start := time.Now()
			_, err = s.readFile(web, time.Now())
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("readFile took %v", took)
			}
			assertManifestError(t, err, web, tc.want)

			if tc.name == "oversize file" {
				// Through Step (which skips what is not a regular file, as
				// a removed manifest): reported once, the running pod stays.
				s.Step()
				select {
				case u := <-s.Updates():
					t.Fatalf("an oversize manifest changed the set to [%s]", names(u.Pods))
				default:
				}
				errs := sink.get(web)
				if len(errs) != 1 {
					t.Fatalf("want the oversize file reported once, got %v", errs)
				}
				assertManifestError(t, errs[0], web, tc.want)
			}
		})
	}
}

// Path itself may be one file: a FIFO or /dev/zero there is refused at
// once, where it used to block the source or read without end.
func TestFileSourceSinglePathThatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pods.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "pods.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo: "not a regular file: a named pipe (FIFO)",
		zero: "not a regular file: a character device",
	} {
		var sink errSink
		s, err := NewFile(FileConfig{NodeName: node, Path: path, Clock: clocktesting.NewFakeClock(time.Now()),
			Logger: testLogger(t), OnError: sink.on})
		if err != nil {
			t.Fatal(err)
		}
		s.Step()
		if u := <-s.Updates(); len(u.Pods) != 0 {
			t.Errorf("%s: pods [%s]", path, names(u.Pods))
		}
		errs := sink.get(path)
		if len(errs) != 1 {
			t.Fatalf("%s: want one reported error, got %v", path, errs)
		}
		assertManifestError(t, errs[0], path, want)
	}
}

// The URL's body is limited to 10 MiB whether or not the server announces
// its length.
func TestHTTPSourceRefusesAnOversizeBody(t *testing.T) {
	huge := podYAML("web", "sleep 60") + "# " + strings.Repeat("x", MaxBodySize) + "\n"
	for _, announce := range []bool{true, false} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if announce {
				w.Header().Set("Content-Length", strconv.Itoa(len(huge)))
			} else {
				w.(http.Flusher).Flush() // chunked: no length
			}
			_, _ = w.Write([]byte(huge))
		}))
		var sink errSink
		s, err := NewHTTP(HTTPConfig{NodeName: node, URL: ts.URL, Clock: clocktesting.NewFakeClock(time.Now()),
			Logger: testLogger(t), OnError: sink.on})
		if err != nil {
			t.Fatal(err)
		}
		s.Step(context.Background())
		ts.Close()
		select {
		case u := <-s.Updates():
			t.Errorf("announce=%v: an oversize body published [%s]", announce, names(u.Pods))
		default:
		}
		errs := sink.get(ts.URL)
		if len(errs) != 1 {
			t.Fatalf("announce=%v: want one reported error, got %v", announce, errs)
		}
		assertManifestError(t, errs[0], ts.URL, "larger than the limit of 10 MiB")
	}
}

func assertManifestError(t *testing.T, err error, path, want string) {
	t.Helper()
	var me *ManifestError
	if !errors.As(err, &me) || me.Path != path {
		t.Fatalf("error %v: want a ManifestError for %s", err, path)
	}
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("error %v is not InvalidArgument", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, want) {
		t.Errorf("error %q: want it to name %s and say %q", msg, path, want)
	}
	if !errors.Is(err, boundedread.ErrNotRegular) && !errors.Is(err, boundedread.ErrTooLarge) {
		t.Errorf("error %v: want ErrNotRegular or ErrTooLarge", err)
	}
}

func replaceWithSymlink(t *testing.T, path, target string) {
	t.Helper()
	remove(t, path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
