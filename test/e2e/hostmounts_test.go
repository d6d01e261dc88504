package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// A host-image pod's volumes show up at their mountPaths, for the
// container and for exec, even where the path does not exist on the host,
// and only there: the host's mount table never shows them.
func TestHostImageVolumeMounts(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	vol := "/tmp/minilet-vol-" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() { _ = os.RemoveAll(vol) })
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "setting"), []byte("from-the-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.WriteManifest("vols.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: vols}
spec:
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: conf, hostPath: {path: %[2]s, type: Directory}}
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "echo from-the-container > %[1]s/data/out && exec sleep 1000"]
    volumeMounts:
    - {name: scratch, mountPath: %[1]s/data}
    - {name: conf, mountPath: %[1]s/conf, readOnly: true}
`, vol, conf))
	name := a.Static("vols")
	noLeak := func(when string) {
		t.Helper()
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(info), vol) {
			t.Errorf("%s: the host's mount table shows the container's mounts:\n%s", when, info)
		}
	}

	var pod v1.Pod
	a.Eventually("vols Running", func() (bool, string) {
		p, ok := a.Pod(name)
		pod = p
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	noLeak("running")
	emptyDir := filepath.Join(a.RootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "scratch")
	a.Eventually("the container's file in the emptyDir's host directory", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(emptyDir, "out"))
		return err == nil && string(b) == "from-the-container\n", fmt.Sprint(string(b), err)
	})
	if ents, err := os.ReadDir(filepath.Join(vol, "data")); err != nil || len(ents) != 0 {
		t.Errorf("the mountPath on the host: %v %v, want an empty directory (the mount point)", ents, err)
	}

	out, err := a.CLI("exec", name, "--", "cat", vol+"/conf/setting", vol+"/data/out")
	if err != nil || out != "from-the-host\nfrom-the-container\n" {
		t.Errorf("exec reading both volumes: %q %v", out, err)
	}
	out, err = a.CLI("exec", name, "--", "/bin/sh", "-c", "echo x > "+vol+"/conf/new")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "Read-only") {
		t.Errorf("exec writing into the readOnly hostPath: %q %v, want a read-only file system error", out, err)
	}
	if _, err := os.Stat(filepath.Join(conf, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the readOnly hostPath got a file: %v", err)
	}
	noLeak("after exec")
}
