package cluster_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// kubectl exec, cp, attach, port-forward and logs -f against a minilet
// node, through the API server, with kubectl's WebSocket default and its
// SPDY fallback (selected by kubectl's own environment switches).
func TestKubectlStreamsToAMiniletNode(t *testing.T) {
	t.Parallel()
	e := setupWith(t, clustertest.Options{ControlPlane: true})
	port := harness.FreePort(t)
	www := filepath.Join(t.TempDir(), "www")
	// Token automounting off: see TestKubeletAPIThroughTheAPIServer.
	e.create(e.pod("shell", "sh", "-c", fmt.Sprintf(
		"mkdir -p %[1]s && echo hello-pf > %[1]s/index.html && /bin/busybox httpd -p 127.0.0.1:%[2]d -h %[1]s && "+
			"i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done", www, port)))
	e.waitPod("shell running", "shell", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	for _, proto := range []struct{ name, env string }{
		{"websocket", ""},
		{"spdy", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"},
	} {
		cmd := e.srv.KubectlCommand("exec", "shell", "--", "sh", "-c", "echo out-$((6*7)); echo err >&2; exit 4")
		cmd.Env = append(os.Environ(), proto.env)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 4 || !strings.Contains(string(out), "out-42") || !strings.Contains(string(out), "err") {
			t.Errorf("%s: kubectl exec exit 4: %v %q", proto.name, err, out)
		}
		cmd = e.srv.KubectlCommand("exec", "-i", "shell", "--", "tr", "a-z", "A-Z")
		cmd.Env = append(os.Environ(), proto.env)
		cmd.Stdin = strings.NewReader("from stdin\n")
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "FROM STDIN\n" {
			t.Errorf("%s: kubectl exec -i: %v %q", proto.name, err, out)
		}
	}
	// -it, under a terminal of its own.
	kubectl := strings.Join(e.srv.KubectlCommand("exec", "-it", "shell", "--", "tty").Args, " ")
	out, err := exec.Command("script", "-qec", kubectl, "/dev/null").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/dev/pts/") {
		t.Errorf("kubectl exec -it -- tty: %v %q", err, out)
	}

	// cp both ways (tar in the container).
	local := filepath.Join(t.TempDir(), "up.txt")
	content := fmt.Sprintf("copied at %s\n", time.Now())
	if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(www, "up.txt")
	if out, err := e.srv.Kubectl("cp", local, "default/shell:"+remote); err != nil {
		t.Errorf("kubectl cp to the pod: %v %s", err, out)
	}
	back := filepath.Join(t.TempDir(), "down.txt")
	if out, err := e.srv.Kubectl("cp", "default/shell:"+remote, back); err != nil {
		t.Errorf("kubectl cp from the pod: %v %s", err, out)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != content {
		t.Errorf("round trip through kubectl cp: %q %v, want %q", b, err, content)
	}

	// attach and logs -f see new lines.
	for _, args := range [][]string{{"attach", "shell"}, {"logs", "-f", "--tail=1", "shell"}} {
		if line := firstLine(t, e.srv.KubectlCommand(args...), "tick "); line == "" {
			t.Errorf("kubectl %v: no tick line", args)
		}
	}

	// port-forward, WebSocket (kubectl's default) and SPDY.
	for _, env := range []string{"", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"} {
		lp := harness.FreePort(t)
		pf := e.srv.KubectlCommand("port-forward", "pod/shell", fmt.Sprintf("%d:%d", lp, port))
		pf.Env = append(os.Environ(), env)
		var pfOut harness.Output
		pf.Stdout, pf.Stderr = &pfOut, &pfOut
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		e.eventually("a page through kubectl port-forward "+env, func() (bool, string) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", lp))
			if err != nil {
				return false, err.Error() + " " + pfOut.String()
			}
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			return string(b) == "hello-pf\n", string(b)
		})
		_ = pf.Process.Kill()
		_ = pf.Wait()
	}
}

// firstLine runs cmd until it prints a line containing want (returned) or
// 60 s pass (""), then stops it.
func firstLine(t *testing.T, cmd *exec.Cmd, want string) string {
	t.Helper()
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill() }) }
	defer func() { stop(); _ = cmd.Wait() }()
	timer := time.AfterFunc(60*time.Second, stop)
	defer timer.Stop()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return sc.Text()
		}
	}
	return ""
}
