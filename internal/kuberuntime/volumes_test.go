package kuberuntime

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// claimPaths resolves every persistentVolumeClaim volume to one path, as
// the volumes package does once Setup found the claim's volume.
type claimPaths struct{ path string }

func (c claimPaths) Path(_ *v1.Pod, _ *v1.Volume) (string, error) { return c.path, nil }

// A claim volume the pod marks readOnly is mounted read-only in every
// container, whatever the volumeMount says.
func TestClaimReadOnlyMounts(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, func(c *Config) { c.Volumes = claimPaths{dir} })
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	claim := func(name string, ro bool) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: ro}}}
	}
	pod.Spec.Volumes = []v1.Volume{claim("ro", true), claim("rw", false)}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "ro", MountPath: "/ro"}, {Name: "rw", MountPath: "/rw"}, {Name: "rw", MountPath: "/rw-ro", ReadOnly: true},
	}
	mounts, err := e.m.makeMounts(pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, true}
	for i, m := range mounts {
		if m.HostPath != dir || m.Readonly != want[i] {
			t.Errorf("mount %s: host %s readonly %v, want %s %v", m.ContainerPath, m.HostPath, m.Readonly, dir, want[i])
		}
	}
}

// A subPath the volume lacks is made with the volume root's mode, setgid
// and sticky bits too (a tmpfs emptyDir owned by the pod's fsGroup is
// 03777), whatever the umask; its group is the root's.
func TestSubPathTakesTheVolumeRootsMode(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o777|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, 0, 123); err != nil {
		t.Skipf("chown: %v", err)
	}
	if err := makeSubPath(root, "a/b"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b"} {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().String(); got != "dgtrwxrwxrwx" {
			t.Errorf("%s: mode %s, want dgtrwxrwxrwx", p, got)
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != 123 {
			t.Errorf("%s: group %d, want 123", p, gid)
		}
	}
}
