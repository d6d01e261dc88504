package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cri/embedded/internal/testlayer"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// loadProbeImage stores an image holding the static probe binary as
// /bin/probe, a user "app" (1000:1000, also in group 2000) and a marker
// file, and returns its ID.
func loadProbeImage(t *testing.T, r *Runtime, ref string, cfg v1.Config) string {
	t.Helper()
	bin := probeBinary(t)
	layer := testlayer.Tar(t,
		testlayer.Dir("bin/", 0o755),
		testlayer.Entry{Name: "bin/probe", Body: string(bin), Mode: 0o755},
		testlayer.Dir("etc/", 0o755),
		testlayer.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n", 0o644),
		testlayer.File("etc/group", "root:x:0:\napp:x:1000:\nextra:x:2000:app\n", 0o644),
		testlayer.File("image-marker", "from the image\n", 0o644),
		testlayer.Dir("tmp/", 0o1777),
	)
	img := testImage(t, cfg, layer)
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	loaded, err := r.LoadArchive(context.Background(), &buf)
	if err != nil {
		t.Fatalf("LoadArchive: %v", err)
	}
	return loaded[0].ID
}

func imageContainerConfig(name, image string, cmd, args []string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd, Args: args,
		LogPath: name + ".log",
	}
}

// runToExit starts a container and waits for its exit; it returns the
// status and the content column of its log lines.
func runToExit(t *testing.T, r *Runtime, sb string, cfg *runtimeapi.ContainerConfig) (*runtimeapi.ContainerStatus, []string) {
	t.Helper()
	id := startContainer(t, r, sb, cfg)
	var st *runtimeapi.ContainerStatus
	waitUntil(t, "container "+cfg.Metadata.Name+" exits", func() bool {
		resp, err := r.ContainerStatus(context.Background(), id, false)
		if err != nil {
			t.Fatal(err)
		}
		st = resp.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	data, err := os.ReadFile(st.LogPath)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			lines = append(lines, f[1]+" "+f[3])
		}
	}
	return st, lines
}

func TestRootfsContainer(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	id := loadProbeImage(t, r, "example.com/probe:1", v1.Config{
		Entrypoint: []string{"/bin/probe"}, Cmd: []string{"echo", "image", "cmd"},
		Env: []string{"FROM_IMAGE=yes", "PATH=/bin"}, WorkingDir: "/work",
	})
	sb, _ := testSandbox(t, r)

	t.Run("image defaults", func(t *testing.T) {
		st, lines := runToExit(t, r, sb, imageContainerConfig("defaults", "example.com/probe:1", nil, nil))
		if st.ExitCode != 0 || len(lines) != 1 || lines[0] != "stdout image cmd" {
			t.Fatalf("exit %d, log %q", st.ExitCode, lines)
		}
		if st.ImageRef != id || st.Image.Image != "example.com/probe:1" {
			t.Fatalf("image %q ref %q, want ref %s", st.Image.Image, st.ImageRef, id)
		}
	})
	t.Run("own root, PID 1, working dir, env", func(t *testing.T) {
		for i, tc := range []struct{ args, want string }{
			{"pid", "1"},
			{"ls /", "bin dev etc image-marker proc sys tmp work"},
			{"cat /image-marker", "from the image"},
			{"pwd", "/work"},
			{"env FROM_IMAGE", "yes"},
			{"ls /dev", "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero"},
		} {
			_, lines := runToExit(t, r, sb, imageContainerConfig(fmt.Sprintf("c%d", i), "example.com/probe:1", nil, strings.Fields(tc.args)))
			if len(lines) != 1 || lines[0] != "stdout "+tc.want {
				t.Errorf("probe %s: log %q, want %q", tc.args, lines, tc.want)
			}
		}
	})
	t.Run("exit code and stderr", func(t *testing.T) {
		st, lines := runToExit(t, r, sb, imageContainerConfig("exit", "example.com/probe:1", []string{"/bin/probe", "exit", "3"}, nil))
		if st.ExitCode != 3 || st.Reason != monitorproc.ReasonError || len(lines) != 1 || lines[0] != "stderr exiting with 3" {
			t.Fatalf("exit %d reason %s log %q", st.ExitCode, st.Reason, lines)
		}
	})
	t.Run("user from the security context and the image", func(t *testing.T) {
		cfg := imageContainerConfig("user", "example.com/probe:1", nil, []string{"id"})
		cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "app"}}
		_, lines := runToExit(t, r, sb, cfg)
		if len(lines) != 1 || lines[0] != "stdout 1000 1000 [2000]" {
			t.Fatalf("id: %q, want uid 1000 gid 1000 groups [2000]", lines)
		}
	})
	t.Run("missing binary is a start error", func(t *testing.T) {
		cid, err := r.CreateContainer(ctx, sb, imageContainerConfig("missing", "example.com/probe:1", []string{"/bin/nope"}, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.StartContainer(ctx, cid); err == nil {
			t.Fatal("StartContainer of a missing binary succeeded")
		}
		resp, _ := r.ContainerStatus(ctx, cid, false)
		if resp.Status.Reason != monitorproc.ReasonStartError {
			t.Fatalf("reason %q, want %s", resp.Status.Reason, monitorproc.ReasonStartError)
		}
	})
	t.Run("writes stay in the container", func(t *testing.T) {
		cid := startContainer(t, r, sb, imageContainerConfig("writer", "example.com/probe:1", nil, []string{"sleep"}))
		out, _, err := r.ExecSync(ctx, cid, []string{"/bin/probe", "write", "/image-marker", "changed"}, 20*time.Second)
		if err != nil {
			t.Fatalf("ExecSync write: %v (%s)", err, out)
		}
		out, _, err = r.ExecSync(ctx, cid, []string{"probe", "cat", "/image-marker"}, 20*time.Second)
		if err != nil || string(out) != "changed" {
			t.Fatalf("ExecSync cat = %q, %v", out, err)
		}
		out, _, err = r.ExecSync(ctx, cid, []string{"probe", "pwd"}, 20*time.Second)
		if err != nil || string(out) != "/work\n" {
			t.Fatalf("ExecSync pwd = %q, %v", out, err)
		}
		// The exec joins the container's PID namespace: PID 1 is the
		// container, and it is not.
		out, _, err = r.ExecSync(ctx, cid, []string{"probe", "cat", "/proc/1/cmdline"}, 20*time.Second)
		if err != nil || !strings.HasPrefix(string(out), "/bin/probe\x00sleep") {
			t.Fatalf("ExecSync cat /proc/1/cmdline = %q, %v", out, err)
		}
		out, _, err = r.ExecSync(ctx, cid, []string{"probe", "pid"}, 20*time.Second)
		if err != nil || string(out) == "1\n" || len(out) > 4 {
			t.Fatalf("ExecSync pid = %q, %v; want a small PID other than 1", out, err)
		}
		_, _, err = r.ExecSync(ctx, cid, []string{"probe", "exit", "4"}, 20*time.Second)
		var code utilexec.CodeExitError
		if !errors.As(err, &code) || code.Code != 4 {
			t.Fatalf("ExecSync exit 4 = %v", err)
		}
		if _, _, err := r.ExecSync(ctx, cid, []string{"/no/such"}, 20*time.Second); !errdefs.IsNotFound(err) {
			t.Fatalf("ExecSync of a missing binary = %v, want NotFound", err)
		}
		// A second container from the image sees the image's file.
		_, lines := runToExit(t, r, sb, imageContainerConfig("reader", "example.com/probe:1", nil, []string{"cat", "/image-marker"}))
		if len(lines) != 1 || lines[0] != "stdout from the image" {
			t.Fatalf("second container read %q", lines)
		}
		if err := r.RemoveContainer(ctx, cid); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(r.stateDir, "containers", cid, "rootfs")); !os.IsNotExist(err) {
			t.Fatalf("writable layer left after RemoveContainer: %v", err)
		}
	})
	t.Run("image removed while in use keeps its layers until the container goes", func(t *testing.T) {
		cid := startContainer(t, r, sb, imageContainerConfig("inuse", "example.com/probe:1", nil, []string{"sleep"}))
		img, _ := r.images.Get(id)
		if err := r.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: id}); err != nil {
			t.Fatal(err)
		}
		layer := r.images.LayerPath(img.Layers[0])
		if _, err := os.Stat(filepath.Join(layer, "bin", "probe")); err != nil {
			t.Fatalf("layer of a running container was deleted: %v", err)
		}
		if out, _, err := r.ExecSync(ctx, cid, []string{"probe", "echo", "alive"}, 20*time.Second); err != nil || string(out) != "alive\n" {
			t.Fatalf("ExecSync after RemoveImage = %q, %v", out, err)
		}
		if err := r.RemoveContainer(ctx, cid); err != nil {
			t.Fatal(err)
		}
		// The earlier exited containers still stand on it too.
		list, _ := r.ListContainers(ctx, nil)
		for _, c := range list {
			if err := r.RemoveContainer(ctx, c.Id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(layer); !os.IsNotExist(err) {
			t.Fatalf("layer left after its last container was removed: %v", err)
		}
	})
}

func TestRootfsContainerStopSignalAndCgroup(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	loadProbeImage(t, r, "example.com/probe:stop", v1.Config{Entrypoint: []string{"/bin/probe"}, Cmd: []string{"trap"}, StopSignal: "SIGUSR1"})
	sb, _ := testSandbox(t, r)
	id := startContainer(t, r, sb, imageContainerConfig("trap", "example.com/probe:stop", nil, nil))
	resp, err := r.ContainerStatus(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	// The container process is in its container cgroup, as host ones are.
	cg, err := os.ReadFile("/proc/" + resp.Info["pid"] + "/cgroup")
	if err != nil || !strings.Contains(string(cg), resp.Info["cgroup"]) {
		t.Fatalf("container cgroups %q (%v), want %s", cg, err, resp.Info["cgroup"])
	}
	waitUntil(t, "the container traps signals", func() bool {
		data, _ := os.ReadFile(resp.Status.LogPath)
		return strings.Contains(string(data), "trapping")
	})
	if err := r.StopContainer(ctx, id, 30); err != nil {
		t.Fatal(err)
	}
	resp, _ = r.ContainerStatus(ctx, id, false)
	data, _ := os.ReadFile(resp.Status.LogPath)
	if resp.Status.ExitCode != 0 || !strings.Contains(string(data), "got user defined signal 1") {
		t.Fatalf("exit %d, log %q; want the image's stop signal SIGUSR1 delivered", resp.Status.ExitCode, data)
	}
}

// TestRootfsContainerCopyFallback runs a container on a private copy of the
// image, as on kernels where overlayfs cannot be mounted.
func TestRootfsContainerCopyFallback(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	r.overlayOnce.Do(func() {}) // overlay "unavailable": overlayOK stays false
	loadProbeImage(t, r, "example.com/probe:copy", v1.Config{Entrypoint: []string{"/bin/probe"}})
	sb, _ := testSandbox(t, r)
	st, lines := runToExit(t, r, sb, imageContainerConfig("ls", "example.com/probe:copy", nil, []string{"ls", "/"}))
	if st.ExitCode != 0 || len(lines) != 1 || lines[0] != "stdout bin dev etc image-marker proc sys tmp" {
		t.Fatalf("exit %d, log %q", st.ExitCode, lines)
	}
	runToExit(t, r, sb, imageContainerConfig("w", "example.com/probe:copy", nil, []string{"write", "/image-marker", "changed"}))
	_, lines = runToExit(t, r, sb, imageContainerConfig("r", "example.com/probe:copy", nil, []string{"cat", "/image-marker"}))
	if len(lines) != 1 || lines[0] != "stdout from the image" {
		t.Fatalf("a write of one container leaked into the image: %q", lines)
	}
	list, _ := r.ListContainers(context.Background(), nil)
	for _, c := range list {
		rc, _ := r.ctrs.Get(c.Id)
		if rc.Rootfs == nil || !rc.Rootfs.Copy {
			t.Fatalf("container %s did not use a copy", c.Id)
		}
	}
}

func TestRootfsContainerCapabilities(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	loadProbeImage(t, r, "example.com/probe:caps", v1.Config{Entrypoint: []string{"/bin/probe"}})
	sb, _ := testSandbox(t, r)
	capBnd := func(status string) string {
		for _, l := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
				return strings.TrimSpace(v)
			}
		}
		return "<none>"
	}
	host, err := monitorproc.ProcBoundingSet("self")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
		want string
	}{
		{"default", nil, "00000000a80425fb"},
		{"add NET_ADMIN, drop KILL", &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{
			AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"CAP_KILL"}}}, "00000000a80435db"},
		{"drop ALL", &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}}, "0000000000000000"},
		{"privileged", &runtimeapi.LinuxContainerSecurityContext{Privileged: true}, fmt.Sprintf("%016x", host)},
	} {
		cfg := imageContainerConfig(fmt.Sprintf("caps%d", i), "example.com/probe:caps", nil, []string{"sleep"})
		cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: tc.sc}
		id := startContainer(t, r, sb, cfg)
		resp, _ := r.ContainerStatus(ctx, id, true)
		status, err := os.ReadFile("/proc/" + resp.Info["pid"] + "/status")
		if err != nil {
			t.Fatal(err)
		}
		// A container cannot gain what the agent itself lacks.
		mask, _ := strconv.ParseUint(tc.want, 16, 64)
		want := fmt.Sprintf("%016x", mask&host)
		if got := capBnd(string(status)); got != want {
			t.Errorf("%s: container CapBnd %s, want %s", tc.name, got, want)
		}
		out, _, err := r.ExecSync(ctx, id, []string{"probe", "cat", "/proc/self/status"}, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := capBnd(string(out)); got != want {
			t.Errorf("%s: exec CapBnd %s, want %s", tc.name, got, want)
		}
		if err := r.RemoveContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRootfsContainerReadOnlyRootAndDevices(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	loadProbeImage(t, r, "example.com/probe:ro", v1.Config{Entrypoint: []string{"/bin/probe"}, WorkingDir: "/app"})
	sb, _ := testSandbox(t, r)
	vol := t.TempDir()
	cfg := imageContainerConfig("ro", "example.com/probe:ro", nil, []string{"write", "/image-marker", "x"})
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}}
	st, lines := runToExit(t, r, sb, cfg)
	if st.ExitCode != 1 || len(lines) != 1 || !strings.Contains(lines[0], "read-only file system") {
		t.Fatalf("write to a read-only root: exit %d, log %q", st.ExitCode, lines)
	}
	// Mounts stay writable, devices appear where asked.
	cfg = imageContainerConfig("vol", "example.com/probe:ro", nil, []string{"write", "/data/out", "hello"})
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}}
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: vol}}
	if st, lines := runToExit(t, r, sb, cfg); st.ExitCode != 0 {
		t.Fatalf("write to a volume: exit %d, log %q", st.ExitCode, lines)
	}
	if data, err := os.ReadFile(filepath.Join(vol, "out")); err != nil || string(data) != "hello" {
		t.Fatalf("volume content %q, %v", data, err)
	}
	cfg = imageContainerConfig("dev", "example.com/probe:ro", nil, []string{"cat", "/dev/plugin0"})
	cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/plugin0", Permissions: "rw"}}
	if st, lines := runToExit(t, r, sb, cfg); st.ExitCode != 0 || len(lines) != 0 {
		t.Fatalf("device: exit %d, log %q", st.ExitCode, lines)
	}
}
