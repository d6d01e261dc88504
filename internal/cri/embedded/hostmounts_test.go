package embedded

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// hostMountFixture is the host side of a host-image container's mounts:
// source directories (one of them read-only with a tmpfs mounted below
// it) and targets, most of them missing on the host.
type hostMountFixture struct {
	rwSrc, roSrc, fileSrc, h2cSrc, privSrc string
	base                                   string // missing on the host; the targets below it are created
	roTarget                               string // exists on the host, with a file of its own
}

func newHostMountFixture(t *testing.T) hostMountFixture {
	t.Helper()
	src := t.TempDir()
	f := hostMountFixture{
		rwSrc: filepath.Join(src, "rw"), roSrc: filepath.Join(src, "ro"), fileSrc: filepath.Join(src, "token"),
		h2cSrc: filepath.Join(src, "h2c"), privSrc: filepath.Join(src, "private"),
		base: filepath.Join(t.TempDir(), "minilet-vol"), roTarget: t.TempDir(),
	}
	for _, d := range []string{f.rwSrc, filepath.Join(f.roSrc, "sub"), filepath.Join(f.h2cSrc, "sub"), filepath.Join(f.privSrc, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{
		filepath.Join(f.roSrc, "from-volume"):    "volume",
		f.fileSrc:                                "the-token",
		filepath.Join(f.roTarget, "host-marker"): "host",
	} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A mount below the read-only source: the container's copy of it must
	// be read-only too.
	mountTmpfs(t, filepath.Join(f.roSrc, "sub"))
	// Sources whose later mounts the host propagates (the host's own root
	// may not): the container's copy of a host-to-container mount gets
	// them, a private one does not.
	shareMount(t, f.h2cSrc)
	shareMount(t, f.privSrc)
	return f
}

// shareMount makes dir a shared mount of its own on the host until the
// test ends.
func shareMount(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
}

// mountTmpfs mounts a tmpfs at dir in the test's (the host's) mount
// namespace until the test ends.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

func (f hostMountFixture) mounts() []*runtimeapi.Mount {
	return []*runtimeapi.Mount{
		{HostPath: f.rwSrc, ContainerPath: f.base + "/rw"},
		{HostPath: f.roSrc, ContainerPath: f.roTarget, Readonly: true},
		{HostPath: f.fileSrc, ContainerPath: f.base + "/secret/token", Readonly: true},
		{HostPath: f.h2cSrc, ContainerPath: f.base + "/h2c", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{HostPath: f.privSrc, ContainerPath: f.base + "/private"},
	}
}

func TestHostImageContainerMounts(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	sb, _ := testSandbox(t, r)
	f := newHostMountFixture(t)
	cfg := hostContainer("c", "/bin/sh", "-c", "echo from-main > rw/main-out && exec sleep 1000")
	cfg.Mounts = f.mounts()
	cfg.WorkingDir = f.base // created by its mounts, in the container only
	id := startContainer(t, r, sb, cfg)
	exec := func(cmd ...string) (string, error) {
		t.Helper()
		out, stderr, err := r.ExecSync(ctx, id, cmd, 30*time.Second)
		return string(out) + string(stderr), err
	}

	t.Run("the main process writes into its volume", func(t *testing.T) {
		waitUntil(t, "the container's file in the volume's host directory", func() bool {
			b, err := os.ReadFile(filepath.Join(f.rwSrc, "main-out"))
			return err == nil && string(b) == "from-main\n"
		})
	})
	t.Run("exec sees the mounts, in the working directory", func(t *testing.T) {
		for _, tc := range []struct{ cmd, want string }{
			{"pwd", f.base},
			{"cat secret/token", "the-token"},
			{"cat " + f.roTarget + "/from-volume", "volume"},
			{"ls " + f.roTarget, "from-volume\nsub"},
			{"echo from-exec > rw/exec-out && cat " + f.rwSrc + "/main-out", "from-main"},
		} {
			out, err := exec("/bin/sh", "-c", tc.cmd)
			if err != nil || strings.TrimSpace(out) != tc.want {
				t.Errorf("exec %q: %q %v, want %q", tc.cmd, out, err, tc.want)
			}
		}
		if b, err := os.ReadFile(filepath.Join(f.rwSrc, "exec-out")); err != nil || string(b) != "from-exec\n" {
			t.Errorf("exec's file in the volume's host directory: %q %v", b, err)
		}
	})
	t.Run("read-only mounts and their submounts refuse writes", func(t *testing.T) {
		for _, p := range []string{f.roTarget + "/new", f.roTarget + "/sub/new", f.base + "/secret/token"} {
			out, err := exec("/bin/sh", "-c", "echo x > "+p)
			var code utilexec.CodeExitError
			if !errors.As(err, &code) || code.ExitStatus() == 0 || !strings.Contains(out, "Read-only") {
				t.Errorf("write %s: %q %v, want a read-only file system error", p, out, err)
			}
		}
	})
	t.Run("propagation from the host", func(t *testing.T) {
		mountTmpfs(t, filepath.Join(f.h2cSrc, "sub"))
		mountTmpfs(t, filepath.Join(f.privSrc, "sub"))
		info, err := exec("cat", "/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, " "+f.base+"/h2c/sub ") {
			t.Errorf("host-to-container mount: the host's later tmpfs is not at %s/h2c/sub:\n%s", f.base, info)
		}
		if strings.Contains(info, " "+f.base+"/private/sub ") {
			t.Errorf("private mount: the host's later tmpfs reached %s/private/sub:\n%s", f.base, info)
		}
	})
	t.Run("the host's view is untouched", func(t *testing.T) {
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(info), f.base) || strings.Contains(string(info), " "+f.roTarget+" ") {
			t.Errorf("the container's mounts leaked to the host:\n%s", info)
		}
		// Missing targets were created as empty mount points; the existing
		// one keeps its own content and gets nothing new.
		for _, p := range []string{f.base + "/rw", f.base + "/h2c"} {
			if ents, err := os.ReadDir(p); err != nil || len(ents) != 0 {
				t.Errorf("mount point %s on the host: %v %v, want an empty directory", p, ents, err)
			}
		}
		if st, err := os.Stat(f.base + "/secret/token"); err != nil || !st.Mode().IsRegular() || st.Size() != 0 {
			t.Errorf("file mount point on the host: %v %v, want an empty file", st, err)
		}
		if ents, err := os.ReadDir(f.roTarget); err != nil || len(ents) != 1 || ents[0].Name() != "host-marker" {
			t.Errorf("existing target on the host: %v %v, want only its own host-marker", ents, err)
		}
	})
	t.Run("the container and its execs share a mount namespace of their own", func(t *testing.T) {
		c, err := r.ctrs.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		own := nsOf(t, "/proc/"+strconv.Itoa(c.Start.Pid)+"/ns/mnt")
		if own == nsOf(t, "/proc/self/ns/mnt") {
			t.Errorf("the container runs in the host's mount namespace %s", own)
		}
		if out, err := exec("readlink", "/proc/self/ns/mnt"); err != nil || strings.TrimSpace(out) != own {
			t.Errorf("exec's mount namespace: %q %v, want the container's %s", out, err, own)
		}
		if _, err := exec("no-such-command-xyz"); !errdefs.IsNotFound(err) {
			t.Errorf("exec of a missing command: err = %v, want NotFound", err)
		}
	})
}

// A privileged host-image container without mounts (nothing to enforce)
// in a pod on the host's namespaces stays in the host's mount namespace,
// and so do its execs.
func TestHostImageContainerWithoutMountsSharesHostNamespace(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandboxWith(t, r, hostNamespaces)
	cfg := hostContainer("c", "sleep", "1000")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}}
	id := startContainer(t, r, sb, cfg)
	c, err := r.ctrs.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	host := nsOf(t, "/proc/self/ns/mnt")
	if got := nsOf(t, "/proc/"+strconv.Itoa(c.Start.Pid)+"/ns/mnt"); got != host {
		t.Errorf("container's mount namespace %s, want the host's %s", got, host)
	}
	out, _, err := r.ExecSync(context.Background(), id, []string{"readlink", "/proc/self/ns/mnt"}, 30*time.Second)
	if err != nil || strings.TrimSpace(string(out)) != host {
		t.Errorf("exec's mount namespace: %q %v, want the host's %s", out, err, host)
	}
}

// A mount whose source is missing is a start error that names it.
func TestHostImageContainerMissingMountSource(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandbox(t, r)
	missing := filepath.Join(t.TempDir(), "gone")
	cfg := hostContainer("c", "true")
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: missing, ContainerPath: filepath.Join(t.TempDir(), "x")}}
	id, err := r.CreateContainer(context.Background(), sb, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(context.Background(), id); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("StartContainer: err = %v, want an error naming %s", err, missing)
	}
	if st := containerState(t, r, id); st.GetReason() != monitorproc.ReasonStartError {
		t.Errorf("reason %q, want %s", st.GetReason(), monitorproc.ReasonStartError)
	}
}

func nsOf(t *testing.T, link string) string {
	t.Helper()
	ns, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
