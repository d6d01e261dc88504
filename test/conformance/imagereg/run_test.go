package imagereg_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/minilet/minilet/test/harness"
)

// The images' programs run: each test unpacks a pulled image and runs
// its program chrooted into it, as a container would.

// chrootRun runs args in root as root, or as "--userspec=UID:GID" when
// the first argument says so.
func chrootRun(t *testing.T, root string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts []string
	if len(args) > 0 && strings.HasPrefix(args[0], "--userspec=") {
		opts, args = []string{args[0]}, args[1:]
	}
	out, err := exec.CommandContext(ctx, "chroot", append(append(opts, root), args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s %s: %v: %s", filepath.Base(root), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestBusyboxHasAShellAndItsApplets(t *testing.T) {
	root := rootfs(t, "BusyBox")
	out := chrootRun(t, root, "/bin/sh", "-c", "echo hello; id -un; ls -d /tmp; stat -c %a /tmp; which wget nc sleep sysctl")
	want := "hello\nroot\n/tmp\n1777\n/bin/wget\n/bin/nc\n/bin/sleep\n/bin/sysctl\n"
	if out != want {
		t.Fatalf("busybox printed %q; want %q (every applet in /bin, as upstream's image)", out, want)
	}
}

func TestNonRootRunsAs1234(t *testing.T) {
	root := rootfs(t, "NonRoot")
	// The image's user (1234) is applied by the runtime; here, that the
	// image runs `id -u` for a user it does not list.
	if out := chrootRun(t, root, "--userspec=1234:1234", "id", "-u"); out != "1234\n" {
		t.Fatalf("id -u printed %q", out)
	}
}

// nnp is set-user-ID root: a non-root user gets euid 0 unless no_new_privs
// stops it, which is what the allowPrivilegeEscalation specs tell apart.
func TestNonewprivsRaisesPrivilegesThroughItsSetUIDBit(t *testing.T) {
	root := rootfs(t, "Nonewprivs")
	st, err := os.Stat(filepath.Join(root, "usr/local/bin/nnp"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSetuid == 0 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("nnp is %v owned by %d; want set-user-ID root", st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
	}
	if out := chrootRun(t, root, "--userspec=1000:1000", "nnp"); out != "Effective uid: 0\n" {
		t.Fatalf("nnp as 1000 printed %q; want %q", out, "Effective uid: 0\n")
	}
	// With no_new_privs (setpriv from util-linux, when the host has it).
	if _, err := exec.LookPath("setpriv"); err == nil {
		out, err := exec.Command("setpriv", "--no-new-privs", "chroot", "--userspec=1000:1000", root, "nnp").CombinedOutput()
		if err != nil || string(out) != "Effective uid: 1000\n" {
			t.Fatalf("nnp with no_new_privs printed %q (%v); want %q", out, err, "Effective uid: 1000\n")
		}
	}
}

// The spec "Override hostname of Pod" runs sh -c 'echo $(hostname);$(hostname -f);'
// with the pod's hostname in /etc/hosts (written by the kubelet).
func TestGlibcDnsTestingResolvesItsHostnameFromEtcHosts(t *testing.T) {
	root := rootfs(t, "GlibcDnsTesting")
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("127.0.0.1 localhost\n10.1.1.1 override-host.example.com override-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("unshare", "--uts", "sh", "-c",
		`hostname override-host && exec chroot "$0" sh -c 'echo $(hostname)";"$(hostname -f)";"'`, root).CombinedOutput()
	if err != nil {
		t.Fatalf("unshare: %v: %s", err, out)
	}
	if string(out) != "override-host;override-host.example.com;\n" {
		t.Fatalf("printed %q", out)
	}
}

func TestPauseEndsOnSIGTERM(t *testing.T) {
	root := rootfs(t, "Pause")
	// Started with SIGINT ignored, a Go program installs its SIGINT handler
	// only when it asks for the signal (signal.Notify), which pause does
	// for SIGTERM and SIGINT at once: the handler in /proc/PID/status
	// (SigCgt) says pause is ready, without guessing a delay.
	cmd := exec.Command("sh", "-c", `trap "" INT; exec chroot --userspec=65535:65535 "$0" /pause`, root)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for !catches(cmd.Process.Pid, syscall.SIGINT) {
		select {
		case err := <-exited:
			t.Fatalf("pause exited before any signal: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("pause never handled SIGINT/SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("pause after SIGTERM: %v; want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause still runs 10s after SIGTERM")
	}
}

// catches reports whether process pid has a handler for sig (SigCgt).
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

func TestAgnhostRunsWithItsImageUser(t *testing.T) {
	requireAgnhost(t)
	root := rootfs(t, "Agnhost")
	if out := chrootRun(t, root, "/agnhost", "--help"); !strings.Contains(out, "fake-registry-server") {
		t.Fatalf("agnhost --help lists no fake-registry-server:\n%s", out)
	}
	if out := chrootRun(t, root, "/agnhost-2", "--help"); !strings.Contains(out, "netexec") {
		t.Fatalf("/agnhost-2 --help:\n%s", out)
	}
	if out := chrootRun(t, root, "id", "user-defined-in-image"); out != "uid=1000(user-defined-in-image) gid=1000(user-defined-in-image) groups=1000(user-defined-in-image),50000(group-defined-in-image)\n" {
		t.Fatalf("id user-defined-in-image: %q", out)
	}
}

// The exec lifecycle-hook specs run `sh -c "curl http://..."` in the
// agnhost image, the sidecar probe specs /bin/bash: both run there, with
// the libraries they brought.
func TestAgnhostHasCurlAndBash(t *testing.T) {
	requireAgnhost(t)
	root := rootfs(t, "Agnhost")
	if out := chrootRun(t, root, "curl", "--version"); !strings.HasPrefix(out, "curl ") {
		t.Fatalf("curl --version in the agnhost image: %q", out)
	}
	if out := chrootRun(t, root, "/bin/bash", "-c", "echo $BASH_VERSION"); !strings.HasPrefix(out, "5.") {
		t.Fatalf("bash in the agnhost image: %q", out)
	}
	if _, err := os.Stat("/bin/nc.openbsd"); err == nil {
		// UDP, as the networking specs use it (busybox's nc has no -u).
		if out := chrootRun(t, root, "/bin/sh", "-c", "nc -h 2>&1 | grep -c -- '-u'"); out == "0\n" {
			t.Fatalf("nc in the agnhost image has no -u: %q", out)
		}
	}
}

// The https lifecycle-hook specs run `agnhost netexec` with the image's
// /localhost.crt and /localhost.key; the kubelet's client does not verify
// the certificate, but the TLS handshake must work.
func TestAgnhostServesTLSWithItsLocalhostCertificate(t *testing.T) {
	requireAgnhost(t)
	root := rootfs(t, "Agnhost")
	port := harness.FreePort(t)
	cmd := exec.Command("chroot", root, "/agnhost", "netexec", fmt.Sprintf("--http-port=%d", port), "--udp-port=-1",
		"--tls-cert-file=/localhost.crt", "--tls-private-key-file=/localhost.key")
	logs := &harness.Output{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's https probes and hooks
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/echo?msg=tls-ok", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "tls-ok" {
				t.Fatalf("GET %s: %s %q", url, resp.Status, body)
			}
			if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Subject.CommonName != "localhost" {
				t.Fatalf("GET %s: not served with the localhost certificate: %+v", url, resp.TLS)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("netexec does not answer %s: %v; its output:\n%s", url, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The private-registry specs run `agnhost fake-registry-server --private`
// and pull localhost:5000/pause:testing with user:password; it must serve
// the pause image from the agnhost image's /var/registry.
func TestAgnhostFakeRegistryServesPauseTesting(t *testing.T) {
	requireAgnhost(t)
	r := registry(t)
	want, err := pullOK(t, r, imageByID(t, r, "Pause")).Digest()
	if err != nil {
		t.Fatal(err)
	}
	port, logs := startFakeRegistry(t)
	ref := fmt.Sprintf("localhost:%d/pause:testing", port)
	if _, err := pull(ref, nil); err == nil {
		t.Fatalf("anonymous pull of %s succeeded", ref)
	}
	img, err := pull(ref, &authn.Basic{Username: "user", Password: "password"})
	if err != nil {
		t.Fatalf("pull %s: %v; server output:\n%s", ref, err, logs.String())
	}
	got, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("%s is %s; the pause image is %s", ref, got, want)
	}
}

// startFakeRegistry runs `agnhost fake-registry-server --private` from
// the agnhost image, as the registry pod of the private-registry specs
// does (uid 5123), on a free port of localhost, until the test ends.
func startFakeRegistry(t *testing.T) (int, *harness.Output) {
	t.Helper()
	root := rootfs(t, "Agnhost")
	port := harness.FreePort(t)
	cmd := exec.Command("chroot", "--userspec=5123:5123", root, "/agnhost", "fake-registry-server", "--private", fmt.Sprintf("--port=%d", port))
	logs := &harness.Output{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	base := fmt.Sprintf("http://localhost:%d/v2/", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("GET %s without credentials: %s; want 401", base, resp.Status)
			}
			return port, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake-registry-server does not answer on %d: %v; its output:\n%s", port, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
