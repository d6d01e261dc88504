package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// exec and port-forward through the kubelet API, driven with the
// CLI as a user on the machine would, on both runtimes: exit codes and
// stdin pass through, 100 MB arrive intact through exec, logs and
// port-forward,
// and a client that goes away leaves no process behind.
func TestStreamsOnBothRuntimes(t *testing.T) {
	// The writer's 100 MB log must stay in one file to come back whole
	// through `logs`: above the default 10Mi it would be rotated.
	const wholeLogs = "containerLogMaxSize: 200Mi\n"
	t.Run("embedded", func(t *testing.T) {
		requireRoot(t)
		if _, err := os.Stat("/bin/busybox"); err != nil {
			t.Skip("needs /bin/busybox on the host (scripts/containerd-up.sh installs it)")
		}
		a := harness.New(t)
		withKubeletConfig(t, a, wholeLogs)
		a.Start()
		streamScenario(t, a, "host", "/bin/busybox ", a.RootDir+"/www", true)
	})
	t.Run("containerd", func(t *testing.T) {
		requireRoot(t)
		harness.ContainerdEndpoint(t)
		a := harness.New(t)
		a.UseContainerd()
		withKubeletConfig(t, a, wholeLogs)
		a.Start()
		// containerd keeps an exec'd process when its client leaves, as
		// under the kubelet (kubernetes/kubernetes#89031): the CRI has no
		// call that ends an exec session.
		streamScenario(t, a, harness.BusyboxImage, "", "/www", false)
	})
}

// streamScenario runs the sessions against pod "streams" on image (bb
// prefixes busybox applets, dir holds the served files); killsOrphans says
// whether the runtime ends an exec'd command whose client went away.
func streamScenario(t *testing.T, a *harness.Agent, image, bb, dir string, killsOrphans bool) {
	port := harness.FreePort(t)
	a.WriteManifest("streams.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: streams
  annotations: {kubectl.kubernetes.io/default-container: main}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "mkdir -p %[2]s && head -c 100000000 /dev/urandom > %[2]s/blob && echo ok > %[2]s/index.html && echo ready && exec %[3]shttpd -f -p 127.0.0.1:%[4]d -h %[2]s"]
    readinessProbe:
      exec: {command: ["/bin/sh", "-c", "test -f %[2]s/blob && %[3]swget -q -O /dev/null http://127.0.0.1:%[4]d/"]}
      periodSeconds: 1
  - name: writer
    image: %[1]s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "%[3]sawk 'BEGIN{for(i=0;i<100000;i++) printf \"%%0999d\\n\", i}'; exec sleep 100000"]
  - name: reader
    image: %[1]s
    imagePullPolicy: IfNotPresent
    stdin: true
    stdinOnce: true
    command: ["/bin/sh", "-c", "while read line; do echo got:$line; done; echo stdin-closed"]
`, image, dir, bb, port))
	name := a.Static("streams")
	a.Eventually("streams Running and Ready", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && p.Status.Phase == v1.PodRunning && s.Ready, describe(p, ok)
	})

	// Exit codes and stderr.
	out, err := a.CLI("exec", name, "--", "/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 3")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(out, "to-out") || !strings.Contains(out, "to-err") {
		t.Errorf("exec exit 3: %v %q, want exit code 3 and both streams", err, out)
	}
	// The kubelet's /run.
	resp, err := a.HTTP.PostForm(a.Addr+"/run/default/"+name+"/main", url.Values{"cmd": {"echo run-ok"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "run-ok\n" {
		t.Errorf("/run: %s %q", resp.Status, body)
	}
	// Stdin.
	cmd := a.CLICommand("exec", "-i", name, "--", "/bin/sh", "-c", "tr a-z A-Z")
	cmd.Stdin = strings.NewReader("hello stdin\n")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "HELLO STDIN\n" {
		t.Errorf("exec -i: %v %q", err, out)
	}

	// The agent's goroutines now, to compare once every session ended.
	baseline := goroutines(t, a)

	// 100 MB through exec, checked against the container's own checksum.
	out, err = a.CLI("exec", name, "--", "/bin/sh", "-c", bb+"sha256sum "+dir+"/blob")
	if err != nil {
		t.Fatalf("sha256sum in the container: %v %s", err, out)
	}
	want := strings.Fields(out)[0]
	cmd = a.CLICommand("exec", name, "--", "/bin/cat", dir+"/blob")
	h, n := sha256.New(), &countWriter{}
	cmd.Stdout = io.MultiWriter(h, n)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || n.n != 100_000_000 || hex.EncodeToString(h.Sum(nil)) != want {
		t.Errorf("100 MB through exec: %v, %d bytes, sha256 %x, want %s; stderr %s", err, n.n, h.Sum(nil), want, stderr.String())
	}

	// 100 MB through logs: 100000 numbered lines of 1000 bytes.
	wantLog := sha256.New()
	for i := range 100000 {
		fmt.Fprintf(wantLog, "%0999d\n", i)
	}
	a.Eventually("100 MB of the writer's log, intact", func() (bool, string) {
		cmd := a.CLICommand("logs", name, "-c", "writer")
		h, n := sha256.New(), &countWriter{}
		cmd.Stdout = io.MultiWriter(h, n)
		if err := cmd.Run(); err != nil {
			return false, err.Error()
		}
		if n.n < 100_000_000 {
			return false, fmt.Sprintf("%d bytes so far", n.n)
		}
		if !bytes.Equal(h.Sum(nil), wantLog.Sum(nil)) {
			t.Fatalf("logs: %d bytes, sha256 differs from the lines written", n.n)
		}
		return true, ""
	})

	// 100 MB through port-forward.
	local := harness.FreePort(t)
	pf := a.CLICommand("port-forward", name, fmt.Sprintf("%d:%d", local, port))
	var pfOut harness.Output
	pf.Stdout, pf.Stderr = &pfOut, &pfOut
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	var got string
	a.Eventually("the blob through port-forward", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/blob", local))
		if err != nil {
			return false, err.Error() + " " + pfOut.String()
		}
		defer func() { _ = resp.Body.Close() }()
		h, n := sha256.New(), &countWriter{}
		if _, err := io.Copy(io.MultiWriter(h, n), resp.Body); err != nil {
			return false, err.Error()
		}
		got = hex.EncodeToString(h.Sum(nil))
		return resp.StatusCode == 200 && n.n == 100_000_000, fmt.Sprintf("%s, %d bytes", resp.Status, n.n)
	})
	if got != want {
		t.Errorf("port-forward sha256 %s, want %s", got, want)
	}
	_ = pf.Process.Kill()
	_ = pf.Wait()
	a.Eventually("the agent's goroutines back to where they were", func() (bool, string) {
		n := goroutines(t, a)
		return n <= baseline+4, fmt.Sprintf("%d goroutines, %d before the sessions", n, baseline)
	})

	// attach -i to a stdinOnce container: what the client types reaches it,
	// its answers come back, and the client's EOF closes its stdin.
	at := a.CLICommand("attach", "-i", name, "-c", "reader")
	at.Stdin = strings.NewReader("hello attach\n")
	if out, err := at.CombinedOutput(); err != nil || !strings.Contains(string(out), "got:hello attach") {
		t.Errorf("attach -i: %v %q", err, out)
	}
	var logged string
	a.Eventually("the reader saw its stdin close", func() (bool, string) {
		err := a.Get("/containerLogs/default/"+name+"/reader?previous=true", &logged)
		return err == nil && strings.Contains(logged, "stdin-closed"), fmt.Sprint(logged, err)
	})

	// A client that leaves mid-stream: its command is killed.
	if !killsOrphans {
		return
	}
	marker := fmt.Sprint(7000 + time.Now().UnixNano()%1000)
	gone := a.CLICommand("exec", name, "--", "/bin/sh", "-c", "exec sleep "+marker)
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	a.Eventually("the exec'd sleep to run", func() (bool, string) { return sleeping(marker) > 0, "" })
	_ = gone.Process.Signal(syscall.SIGKILL)
	_ = gone.Wait()
	a.Eventually("the exec'd sleep to go with its client", func() (bool, string) {
		n := sleeping(marker)
		return n == 0, fmt.Sprintf("%d left", n)
	})
}

// goroutines reads go_goroutines from the agent's /metrics.
func goroutines(t *testing.T, a *harness.Agent) int {
	t.Helper()
	var s string
	if err := a.Get("/metrics", &s); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("go_goroutines %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("no go_goroutines on /metrics")
	return 0
}

// sleeping counts processes running "sleep MARKER".
func sleeping(marker string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			n++
		}
	}
	return n
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
