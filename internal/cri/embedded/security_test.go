package embedded

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/minilet/minilet/internal/cri/conformance"
	"github.com/minilet/minilet/internal/cri/embedded/internal/testlayer"
)

const busyboxRef = "minilet.test/busybox-security:latest"

// busyboxArchive is an image of the host's static busybox with the
// applets the security conformance cases run, built once per test process.
func busyboxArchive(t *testing.T) []byte {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("no static busybox to build a test image from: %v", err)
	}
	entries := []testlayer.Entry{
		testlayer.Dir("bin/", 0o755),
		{Name: "bin/busybox", Body: string(bin), Mode: 0o755},
		testlayer.Dir("etc/", 0o755),
		testlayer.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644),
		testlayer.File("etc/group", "root:x:0:\n", 0o644),
		testlayer.Dir("tmp/", 0o1777),
	}
	for _, applet := range []string{"sh", "id", "grep", "tr", "awk", "wc", "tail", "mktemp", "cat", "rm", "rmdir", "mkdir", "echo", "sleep"} {
		entries = append(entries, testlayer.Symlink("bin/"+applet, "busybox"))
	}
	img := testImage(t, v1.Config{Env: []string{"PATH=/bin"}}, testlayer.Tar(t, entries...))
	tag, err := name.NewTag(busyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSecurityConformanceRootfs runs the security part of the conformance
// suite on containers from an image (TestConformance covers the host
// image), with execs entering them through the Go trampoline (a re-exec of
// the test binary).
func TestSecurityConformanceRootfs(t *testing.T) {
	requireRoot(t)
	runSecurityConformanceRootfs(t, "")
}

// TestSecurityConformanceRootfsExecHelper is TestSecurityConformanceRootfs
// with the installed layout: the small monitor, and execs entering through
// the C exec helper of cmd/minilet-exec next to it (TestConformanceSmallMonitor
// covers the host image so).
func TestSecurityConformanceRootfsExecHelper(t *testing.T) {
	requireRoot(t)
	runSecurityConformanceRootfs(t, smallMonitor(t))
}

func runSecurityConformanceRootfs(t *testing.T, monitorPath string) {
	archive := busyboxArchive(t)
	conformance.RunSecurity(t, func(t *testing.T) conformance.RuntimeUnderTest {
		r := newTestRuntimeWith(t, Config{RootDir: t.TempDir(), MonitorPath: monitorPath})
		if _, err := r.LoadArchive(context.Background(), bytes.NewReader(archive)); err != nil {
			t.Fatalf("LoadArchive: %v", err)
		}
		return r
	}, conformance.WithImage(busyboxRef))
}
