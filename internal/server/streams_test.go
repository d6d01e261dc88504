package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// recordingStreamer records what the API asked of the runtime.
type recordingStreamer struct {
	cmd   []string
	o     StreamOptions
	ports []int32
}

func (r *recordingStreamer) ExecURL(_ context.Context, _ *v1.Pod, _ string, cmd []string, o StreamOptions) (*url.URL, error) {
	r.cmd, r.o = cmd, o
	return nil, errdefs.ErrUnavailable
}

func (r *recordingStreamer) AttachURL(_ context.Context, _ *v1.Pod, _ string, o StreamOptions) (*url.URL, error) {
	r.o = o
	return nil, errdefs.ErrUnavailable
}

func (r *recordingStreamer) PortForwardURL(_ context.Context, _ *v1.Pod, ports []int32) (*url.URL, error) {
	r.ports = ports
	return nil, errdefs.ErrUnavailable
}

func (r *recordingStreamer) Run(_ context.Context, _ *v1.Pod, _ string, cmd []string) ([]byte, error) {
	return []byte(strings.Join(cmd, "|")), nil
}

// The streaming endpoints read the kubelet's parameters and refuse bad
// requests before any runtime is asked.
func TestStreamingRequests(t *testing.T) {
	f := newFake(t)
	rec := &recordingStreamer{}
	cfg := configFor(f)
	cfg.Streams = rec
	ts := httptest.NewServer(New(cfg).Handler())
	defer ts.Close()
	post := func(path string) (int, string) {
		resp, err := http.Post(ts.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/exec/default/ghost/nginx?command=ls&output=1", "pod default/ghost", 404},
		{"/exec/default/web-node1/nginx?command=ls", "at least 1 of stdin, stdout, stderr", 400},
		{"/portForward/default/web-node1?port=0", "port", 400},
		{"/portForward/default/web-node1?port=99999", "port", 400},
		{"/exec/default/web-node1/wrong-uid/nginx?command=ls&output=1", "UID wrong-uid", 404},
	} {
		if code, body := post(tc.path); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s: %d %s, want %d with %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	post("/exec/default/web-node1/nginx?command=sh&command=-c&command=echo+hi&input=1&output=1&error=1&tty=1")
	if strings.Join(rec.cmd, " ") != "sh -c echo hi" || rec.o != (StreamOptions{Stdin: true, Stdout: true, TTY: true}) {
		t.Errorf("exec asked %q %+v; want the command in order and no stderr under a tty", rec.cmd, rec.o)
	}
	post("/portForward/default/web-node1?port=80&port=8080,9090")
	if len(rec.ports) != 3 || rec.ports[0] != 80 || rec.ports[2] != 9090 {
		t.Errorf("port-forward asked ports %v", rec.ports)
	}
	if code, body := post("/run/default/web-node1/nginx?cmd=echo+a+b"); code != 200 || body != "echo|a|b" {
		t.Errorf("/run: %d %q", code, body)
	}
}
