package podsource

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// manifestServer serves whatever body and status the test sets, and
// remembers the last request's X-Token header.
type manifestServer struct {
	mu     sync.Mutex
	status int
	body   string
	token  string
}

func (m *manifestServer) set(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *manifestServer) lastToken() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.token
}

func (m *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.token = r.Header.Get("X-Token")
	status, body := m.status, m.body
	m.mu.Unlock()
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

const podList = `{"apiVersion":"v1","kind":"PodList","items":[
 {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"host"}]}},
 {"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"host"}]}}]}`

func TestHTTPSourceStep(t *testing.T) {
	srv := &manifestServer{}
	srv.set(http.StatusOK, podYAML("web", "sleep 60"))
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)

	var sink errSink
	s, err := NewHTTP(HTTPConfig{NodeName: node, URL: ts.URL + "/pods", Header: http.Header{"X-Token": {"secret"}},
		Logger: testLogger(t), OnError: sink.on})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	s.Step(ctx)
	u := <-s.Updates()
	if names(u.Pods) != "web-node1" || u.Source != "http" {
		t.Fatalf("first read: %s from %q", names(u.Pods), u.Source)
	}
	if u.Pods[0].Annotations[podspec.AnnotationConfigSource] != "http" {
		t.Fatalf("annotations %v", u.Pods[0].Annotations)
	}
	if srv.lastToken() != "secret" {
		t.Fatalf("header not sent: %q", srv.lastToken())
	}

	srv.set(http.StatusOK, podList)
	s.Step(ctx)
	if u := <-s.Updates(); names(u.Pods) != "a-node1,b-node1" {
		t.Fatalf("pod list: %s", names(u.Pods))
	}

	// A failing server keeps the last set and is reported once.
	srv.set(http.StatusInternalServerError, "boom")
	s.Step(ctx)
	s.Step(ctx)
	select {
	case u := <-s.Updates():
		t.Fatalf("a failed read changed the set: %s", names(u.Pods))
	default:
	}
	errs := sink.get(ts.URL + "/pods")
	if len(errs) != 1 || !errors.Is(errs[0], errdefs.ErrUnavailable) || !strings.Contains(errs[0].Error(), "500") {
		t.Fatalf("server error reports: %v", errs)
	}

	// A bad body is reported as invalid, with the field.
	srv.set(http.StatusOK, strings.Replace(podList, `"image":"host"`, `"image":"host","bogus":1`, 1))
	s.Step(ctx)
	errs = sink.get(ts.URL + "/pods")
	if len(errs) != 2 || !errors.Is(errs[1], errdefs.ErrInvalidArgument) || !strings.Contains(errs[1].Error(), "bogus") {
		t.Fatalf("bad body reports: %v", errs)
	}
}

// Run polls on its own (real clock, short period) and delivers changes.
func TestHTTPSourceRunPolls(t *testing.T) {
	srv := &manifestServer{}
	srv.set(http.StatusOK, podJSON("one"))
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)

	s, err := NewHTTP(HTTPConfig{NodeName: node, URL: ts.URL, Period: 50 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, s.Run)
	waitNames(t, s.Updates(), "one-node1")
	srv.set(http.StatusOK, podList)
	waitUpdate(t, s.Updates(), "the pod list", func(p []*v1.Pod) bool { return names(p) == "a-node1,b-node1" })
}

func TestNewHTTPRejectsBadConfig(t *testing.T) {
	for _, cfg := range []HTTPConfig{
		{URL: "http://x"},
		{NodeName: "n", URL: "ftp://x/pods"},
		{NodeName: "n", URL: "not a url"},
		{NodeName: "n", URL: "http://x", Period: -time.Second},
	} {
		if _, err := NewHTTP(cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewHTTP(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
}

// A URL that answers 200 with an empty body has no pods, as in the
// kubelet: the source is read (ready) with an empty set, and a later empty
// answer removes the pods it served before.
func TestHTTPSourceEmptyBodyIsEmptySet(t *testing.T) {
	srv := &manifestServer{}
	srv.set(http.StatusOK, "")
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	var sink errSink
	s, err := NewHTTP(HTTPConfig{NodeName: node, URL: ts.URL, Logger: testLogger(t), OnError: sink.on})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.Step(ctx)
	select {
	case u := <-s.Updates():
		if len(u.Pods) != 0 {
			t.Fatalf("empty body: pods %s", names(u.Pods))
		}
	default:
		t.Fatal("an empty body delivered no snapshot; the source never becomes ready")
	}
	srv.set(http.StatusOK, podJSON("one"))
	s.Step(ctx)
	if u := <-s.Updates(); names(u.Pods) != "one-node1" {
		t.Fatalf("pods %s", names(u.Pods))
	}
	srv.set(http.StatusOK, "\n")
	s.Step(ctx)
	if u := <-s.Updates(); len(u.Pods) != 0 {
		t.Fatalf("after an empty body: %s", names(u.Pods))
	}
	if errs := sink.get(ts.URL); len(errs) != 0 {
		t.Fatalf("an empty body is not an error: %v", errs)
	}
}
