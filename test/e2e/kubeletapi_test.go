package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// On one machine, a pod's logs are for root: the HTTPS API wants the local
// client certificate (readable by root only), an unprivileged user's CLI
// gets nothing, and the read-only port serves pods but never logs.
func TestContainerLogsAreForRootOnly(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	ro := harness.FreePort(t)
	a.ExtraArgs = []string{"--read-only-port", fmt.Sprint(ro)}
	a.Start()
	a.WriteManifest("secret.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: secret}
spec:
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "echo the-secret-line; exec sleep 1000"]}
`)
	name := a.Static("secret")
	logPath := "/containerLogs/default/" + name + "/main"
	a.Eventually("the log through the HTTPS API as the local admin", func() (bool, string) {
		var s string
		err := a.Get(logPath, &s)
		return err == nil && strings.Contains(s, "the-secret-line"), fmt.Sprint(s, err)
	})

	// TLS without a client certificate: 401.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed agent
	code, body := fetch(t, c, a.Addr+logPath)
	if code != http.StatusUnauthorized || strings.Contains(body, "the-secret-line") {
		t.Errorf("logs without a client certificate: %d %q, want 401", code, body)
	}

	// The read-only port: pods yes, logs no.
	roURL := fmt.Sprintf("http://127.0.0.1:%d", ro)
	if code, body := fetch(t, http.DefaultClient, roURL+"/pods"); code != 200 || !strings.Contains(body, name) {
		t.Errorf("read-only /pods: %d %.200q", code, body)
	}
	if code, body := fetch(t, http.DefaultClient, roURL+logPath); code != 404 || strings.Contains(body, "the-secret-line") {
		t.Errorf("read-only logs: %d %q, want 404", code, body)
	}

	// An unprivileged user's CLI, which can run and knows the port.
	dir, err := os.MkdirTemp("", "mlt-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(harness.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/minilet", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := exec.Command(dir+"/minilet", "logs", name, "--server", a.Addr, "--root-dir", a.RootDir)
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := nobody.CombinedOutput()
	if err == nil || strings.Contains(string(out), "the-secret-line") || !strings.Contains(string(out), "permission denied") {
		t.Errorf("minilet logs as nobody: %v %q, want a permission error", err, out)
	}
	for _, f := range []string{"local-admin.key", "local-ca.key", "kubelet.key"} {
		if st, err := os.Stat(a.RootDir + "/pki/" + f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("pki/%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
	if p, ok := a.Pod(name); !ok || p.Status.Phase != v1.PodRunning {
		t.Errorf("pod %s not running: %+v", name, p.Status)
	}
}

func fetch(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
