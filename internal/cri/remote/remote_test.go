package remote_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	utilexec "k8s.io/utils/exec"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/errdefs"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  remote.Config
	}{
		{"empty endpoint", remote.Config{}},
		{"tcp endpoint", remote.Config{Endpoint: "tcp://127.0.0.1:1"}},
		{"negative timeout", remote.Config{Endpoint: "unix:///run/x.sock", RequestTimeout: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := remote.New(context.Background(), tc.cfg)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("New(%+v) = %v, want ErrInvalidArgument", tc.cfg, err)
			}
		})
	}
}

func TestNewWithoutARuntimeIsUnavailable(t *testing.T) {
	ep := "unix://" + filepath.Join(t.TempDir(), "nobody.sock")
	_, err := remote.New(context.Background(), remote.Config{Endpoint: ep})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("New(%s) = %v, want ErrUnavailable", ep, err)
	}
	if !strings.Contains(err.Error(), ep) {
		t.Errorf("error %q does not name the endpoint", err)
	}
}

func TestNotFoundIsClassified(t *testing.T) {
	rt := connect(t, endpoint(t))
	_, err := rt.ContainerStatus(context.Background(), "no-such-container", false)
	if !errors.Is(err, errdefs.ErrNotFound) || !crierrors.IsNotFound(err) {
		t.Fatalf("ContainerStatus of unknown id: %v; want errdefs.ErrNotFound and gRPC NotFound", err)
	}
	if v, err := rt.Version(context.Background(), "v1"); err != nil || v.GetRuntimeName() != "containerd" {
		t.Errorf("Version = %v, %v; want containerd", v, err)
	}
	if !strings.HasPrefix(rt.RuntimeVersion(), "containerd://") {
		t.Errorf("RuntimeVersion = %q", rt.RuntimeVersion())
	}
}

func TestExecSyncTimeoutIsADeadline(t *testing.T) {
	ctx := context.Background()
	rt := connect(t, endpoint(t))
	_, ctr := runBusybox(t, rt, "sleep", "1000")
	_, _, err := rt.ExecSync(ctx, ctr, []string{"sleep", "30"}, time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ExecSync past its timeout: %v, want context.DeadlineExceeded", err)
	}
	_, _, err = rt.ExecSync(ctx, ctr, []string{"sh", "-c", "exit 2"}, 10*time.Second)
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 2 {
		t.Errorf("ExecSync exiting 2: %v, want an ExitError with status 2", err)
	}
}

func TestHostNetworkSandboxWithAHostname(t *testing.T) {
	rt := connect(t, endpoint(t))
	cfg := sandboxConfig(t)
	cfg.Hostname = "a-hostname"
	id, err := rt.RunPodSandbox(context.Background(), cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox with host network and a hostname: %v", err)
	}
	removeSandboxAtEnd(t, rt, id, cfg)
	if cfg.Hostname != "a-hostname" {
		t.Errorf("RunPodSandbox changed the caller's config")
	}
}

// TestClientSurvivesContainerdRestart runs its own containerd (never the
// shared one), stops it while a container runs, and checks that the same
// client reports the runtime unavailable, then works again once containerd
// is back, with the container untouched.
func TestClientSurvivesContainerdRestart(t *testing.T) {
	endpoint(t) // CI has containerd; without it, skip
	if testing.Short() {
		t.Skip("starts a private containerd")
	}
	ctx := context.Background()
	state, ep := privateContainerd(t)
	rt := connect(t, ep)
	_, ctr := runBusybox(t, rt, "sleep", "1000")
	before, err := rt.ContainerStatus(ctx, ctr, false)
	if err != nil {
		t.Fatal(err)
	}

	stopContainerd(t, state)
	waitUntil(t, "calls to fail with ErrUnavailable", func() (bool, string) {
		_, err := rt.Status(ctx, false)
		return errors.Is(err, errdefs.ErrUnavailable), errString(err)
	})

	if out, err := exec.Command(script("containerd-up.sh"), state).CombinedOutput(); err != nil {
		t.Fatalf("restarting containerd: %v\n%s", err, out)
	}
	waitUntil(t, "the same client to reach containerd again", func() (bool, string) {
		_, err := rt.Status(ctx, false)
		return err == nil, errString(err)
	})
	after, err := rt.ContainerStatus(ctx, ctr, false)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || after.GetStatus().GetStartedAt() != before.GetStatus().GetStartedAt() {
		t.Errorf("after the containerd restart: %v started %d; want RUNNING started %d",
			after.GetStatus().GetState(), after.GetStatus().GetStartedAt(), before.GetStatus().GetStartedAt())
	}
	if out, _, err := rt.ExecSync(ctx, ctr, []string{"echo", "still here"}, 10*time.Second); err != nil || string(out) != "still here\n" {
		t.Errorf("ExecSync after the restart = %q, %v", out, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// script returns the path of a script in the repository's scripts/.
func script(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", name)
}

// privateContainerd starts a containerd of the test's own and stops it
// (with everything it ran) when the test ends.
func privateContainerd(t *testing.T) (state, endpoint string) {
	t.Helper()
	state, err := os.MkdirTemp("", "mlt-cd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(script("containerd-down.sh"), state).CombinedOutput(); err != nil {
			t.Errorf("containerd-down.sh: %v\n%s", err, out)
		}
	})
	out, err := exec.Command(script("containerd-up.sh"), state).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("containerd-up.sh: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return state, lines[len(lines)-1]
}

// stopContainerd ends a private containerd the way a restart does
// (SIGTERM); its shims and containers keep running.
func stopContainerd(t *testing.T, state string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "containerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping containerd %d: %v", pid, err)
	}
	waitUntil(t, "containerd to exit", func() (bool, string) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		// Gone, or a zombie its parent has not reaped yet.
		return err != nil || strings.Contains(string(b), ") Z "), string(b)
	})
}

// waitUntil polls cond every 50 ms for up to 60 s.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last seen: %s", what, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sandboxConfig is a host-network sandbox unique to the test.
func sandboxConfig(t *testing.T) *runtimeapi.PodSandboxConfig {
	uid := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "remote-test", Uid: uid},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/minilet-remote-test-" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_NODE,
			}},
		},
	}
}

// removeSandboxAtEnd removes the sandbox and its cgroups when t ends.
func removeSandboxAtEnd(t *testing.T, rt *remote.Runtime, id string, cfg *runtimeapi.PodSandboxConfig) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = rt.StopPodSandbox(ctx, id)
		if err := rt.RemovePodSandbox(ctx, id); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
		removeChildCgroups(cfg.Linux.CgroupParent)
		entries, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range entries {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), cfg.Linux.CgroupParent))
		}
	})
}

// runBusybox runs cmd in a busybox container in a new sandbox.
func runBusybox(t *testing.T, rt *remote.Runtime, cmd ...string) (sandbox, container string) {
	t.Helper()
	ctx := context.Background()
	cfg := sandboxConfig(t)
	sb, err := rt.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	removeSandboxAtEnd(t, rt, sb, cfg)
	id, err := rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
		Command:  cmd,
		LogPath:  "main/0.log",
	}, cfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return sb, id
}
