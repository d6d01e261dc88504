package volumes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/errdefs"
)

// objects stands in for the API server (the cluster tests use the real
// one): configMaps, secrets, claims and volumes, and tokens numbered by
// request.
type objects struct {
	mu       sync.Mutex
	cms      map[string]*v1.ConfigMap
	secrets  map[string]*v1.Secret
	pvcs     map[string]*v1.PersistentVolumeClaim
	pvs      map[string]*v1.PersistentVolume
	requests int
	clock    *clocktesting.FakeClock
}

func (o *objects) ConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cm, ok := o.cms[ns+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, fmt.Errorf("configmaps %q not found: %w", name, errdefs.ErrNotFound)
}

func (o *objects) Secret(_ context.Context, ns, name string) (*v1.Secret, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.secrets[ns+"/"+name]; ok {
		return s.DeepCopy(), nil
	}
	return nil, fmt.Errorf("secrets %q not found: %w", name, errdefs.ErrNotFound)
}

func (o *objects) ServiceAccountToken(_ context.Context, pod *v1.Pod, spec authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequestStatus, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests++
	exp := o.clock.Now().Add(time.Duration(*spec.ExpirationSeconds) * time.Second)
	return &authenticationv1.TokenRequestStatus{
		Token:               fmt.Sprintf("token-%d-for-%s-%v", o.requests, pod.Name, spec.Audiences),
		ExpirationTimestamp: metav1.NewTime(exp),
	}, nil
}

func (o *objects) PersistentVolumeClaim(_ context.Context, ns, name string) (*v1.PersistentVolumeClaim, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.pvcs[ns+"/"+name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, fmt.Errorf("persistentvolumeclaims %q not found: %w", name, errdefs.ErrNotFound)
}

func (o *objects) PersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if pv, ok := o.pvs[name]; ok {
		return pv.DeepCopy(), nil
	}
	return nil, fmt.Errorf("persistentvolumes %q not found: %w", name, errdefs.ErrNotFound)
}

func newManager(t *testing.T) (*Manager, *objects) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounts tmpfs: needs root")
	}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	o := &objects{cms: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}, clock: clk,
		pvcs: map[string]*v1.PersistentVolumeClaim{}, pvs: map[string]*v1.PersistentVolume{}}
	m, err := New(Config{PodsDir: t.TempDir(), Objects: o, Clock: clk, NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // unmount what a test left, before its TempDir goes
		entries, _ := os.ReadDir(m.cfg.PodsDir)
		for _, e := range entries {
			if err := m.Teardown(types.UID(e.Name())); err != nil {
				t.Error(err)
			}
		}
	})
	return m, o
}

func testPod(vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "web", "tier": "front"}},
		Spec:       v1.PodSpec{ServiceAccountName: "runner", Volumes: vols, Containers: []v1.Container{{Name: "c"}}},
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func permOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// A configMap volume holds its keys (or the items asked for, with their
// modes) through the ..data link; an update swaps the whole set at once
// and drops removed keys.
func TestConfigMapVolumeUpdatesAtomically(t *testing.T) {
	m, o := newManager(t)
	o.cms["ns/cfg"] = &v1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"bin": {0, 1}}}
	pod := testPod(
		v1.Volume{Name: "all", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		v1.Volume{Name: "some", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr.To[int32](0o600),
			Items: []v1.KeyToPath{{Key: "a", Path: "dir/a.txt", Mode: ptr.To[int32](0o400)}, {Key: "b", Path: "b"}},
		}}},
	)
	ctx := context.Background()
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	all, _ := m.Path(pod, &pod.Spec.Volumes[0])
	some, _ := m.Path(pod, &pod.Spec.Volumes[1])
	if got := read(t, filepath.Join(all, "a")) + read(t, filepath.Join(all, "b")); got != "12" || read(t, filepath.Join(all, "bin")) != "\x00\x01" {
		t.Errorf("all keys: %q", got)
	}
	if permOf(t, filepath.Join(all, "a")) != 0o644 || permOf(t, filepath.Join(some, "dir/a.txt")) != 0o400 || permOf(t, filepath.Join(some, "b")) != 0o600 {
		t.Errorf("modes: %v %v %v", permOf(t, filepath.Join(all, "a")), permOf(t, filepath.Join(some, "dir/a.txt")), permOf(t, filepath.Join(some, "b")))
	}
	if target, err := os.Readlink(filepath.Join(all, "a")); err != nil || target != "..data/a" {
		t.Errorf("a is not a link through ..data: %q %v", target, err)
	}
	before, _ := os.Readlink(filepath.Join(all, dataLink))
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(all, dataLink)); again != before {
		t.Errorf("unchanged content rewritten: %s → %s", before, again)
	}

	o.cms["ns/cfg"] = &v1.ConfigMap{Data: map[string]string{"a": "one", "c": "3"}}
	err := m.Setup(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), `volume "some": configmap "cfg" has no key "b"`) {
		t.Errorf("a missing item key: %v", err)
	}
	if read(t, filepath.Join(all, "a")) != "one" || read(t, filepath.Join(all, "c")) != "3" {
		t.Error("update not visible")
	}
	if _, err := os.Lstat(filepath.Join(all, "b")); !os.IsNotExist(err) {
		t.Errorf("removed key b still there: %v", err)
	}
	entries, _ := os.ReadDir(all)
	var payloads int
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..payload-") {
			payloads++
		}
	}
	if payloads != 1 {
		t.Errorf("%d payload directories left, want 1", payloads)
	}
}

// Missing objects: an optional one gives an empty volume, another is an
// error naming the volume and the object; item paths cannot leave the
// volume.
func TestMissingObjectsAndBadPaths(t *testing.T) {
	m, o := newManager(t)
	ctx := context.Background()
	opt := testPod(v1.Volume{Name: "opt", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "gone", Optional: ptr.To(true)}}})
	if err := m.Setup(ctx, opt); err != nil {
		t.Errorf("optional missing secret: %v", err)
	}
	must := testPod(v1.Volume{Name: "must", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "gone"}}})
	if err := m.Setup(ctx, must); err == nil || !strings.Contains(err.Error(), `volume "must": secret "gone"`) {
		t.Errorf("missing secret: %v", err)
	}
	o.cms["ns/cfg"] = &v1.ConfigMap{Data: map[string]string{"a": "1"}}
	for _, p := range []string{"../escape", "/abs", "a/../../x", "..data/a"} {
		bad := testPod(v1.Volume{Name: "bad", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Items: []v1.KeyToPath{{Key: "a", Path: p}}}}})
		bad.UID = "uid-bad"
		if err := m.Setup(ctx, bad); err == nil || !strings.Contains(err.Error(), `volume "bad"`) {
			t.Errorf("item path %q: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(m.cfg.PodsDir, "escape")); !os.IsNotExist(err) {
		t.Error("a file was written outside the volume")
	}
}

// Secrets and projected volumes live on a tmpfs; Teardown unmounts it
// and removes every volume of the pod.
func TestSecretOnTmpfsAndTeardown(t *testing.T) {
	m, o := newManager(t)
	o.secrets["ns/db"] = &v1.Secret{Data: map[string][]byte{"pw": []byte("hunter2")}}
	pod := testPod(
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db"}}},
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "ram", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("8Mi"))}}},
	)
	if err := m.Setup(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	creds, _ := m.Path(pod, &pod.Spec.Volumes[0])
	scratch, _ := m.Path(pod, &pod.Spec.Volumes[1])
	ram, _ := m.Path(pod, &pod.Spec.Volumes[2])
	if read(t, filepath.Join(creds, "pw")) != "hunter2" {
		t.Error("secret content")
	}
	for _, d := range []string{creds, ram} {
		var fs unix.Statfs_t
		if err := unix.Statfs(d, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
			t.Errorf("%s is not on a tmpfs: type %x, %v", d, fs.Type, err)
		}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(ram, &fs); err == nil && int64(fs.Blocks)*fs.Bsize != 8<<20 {
		t.Errorf("Memory emptyDir size %d, want sizeLimit 8Mi", int64(fs.Blocks)*fs.Bsize)
	}
	if permOf(t, scratch) != 0o777 {
		t.Errorf("emptyDir mode %v, want 0777", permOf(t, scratch))
	}
	if err := m.Teardown(pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.PodsDir, string(pod.UID), "volumes")); !os.IsNotExist(err) {
		t.Errorf("volumes left after teardown: %v", err)
	}
}

// The default kube-api-access volume: a token bound to the pod, the CA
// and the namespace; the token is renewed past 80 % of its lifetime, not
// before.
func TestProjectedServiceAccountToken(t *testing.T) {
	m, o := newManager(t)
	o.cms["ns/kube-root-ca.crt"] = &v1.ConfigMap{Data: map[string]string{"ca.crt": "CA"}}
	pod := testPod(v1.Volume{Name: "kube-api-access-x", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o644),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			}}},
		},
	}}})
	ctx := context.Background()
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir, _ := m.Path(pod, &pod.Spec.Volumes[0])
	if got := read(t, filepath.Join(dir, "token")); got != "token-1-for-web-[]" {
		t.Errorf("token %q", got)
	}
	if read(t, filepath.Join(dir, "ca.crt")) != "CA" || read(t, filepath.Join(dir, "namespace")) != "ns" {
		t.Error("ca.crt or namespace")
	}
	if got := read(t, filepath.Join(dir, "labels")); got != "app=\"web\"\ntier=\"front\"" {
		t.Errorf("labels file %q", got)
	}
	clk := m.cfg.Clock.(*clocktesting.FakeClock)
	clk.Step(47 * time.Minute) // 78 %
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if o.requests != 1 {
		t.Errorf("renewed at 78%% of the lifetime: %d requests", o.requests)
	}
	clk.Step(2 * time.Minute) // 82 %
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir, "token")); o.requests != 2 || got != "token-2-for-web-[]" {
		t.Errorf("not renewed past 80%%: %d requests, token %q", o.requests, got)
	}
	if err := m.Teardown(pod.UID); err != nil {
		t.Fatal(err)
	}
}

// Volumes of pods no longer known (deleted while the agent was down) are
// torn down; those of known pods stay.
func TestCleanupOrphans(t *testing.T) {
	m, o := newManager(t)
	o.secrets["ns/db"] = &v1.Secret{Data: map[string][]byte{"pw": []byte("x")}}
	vol := v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db"}}}
	kept, gone := testPod(vol), testPod(vol)
	gone.UID = "uid-gone"
	for _, p := range []*v1.Pod{kept, gone} {
		if err := m.Setup(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.CleanupOrphans(map[types.UID]bool{kept.UID: true}); err != nil {
		t.Fatal(err)
	}
	keptDir, _ := m.Path(kept, &kept.Spec.Volumes[0])
	if read(t, filepath.Join(keptDir, "pw")) != "x" {
		t.Error("a known pod's volume was touched")
	}
	if _, err := os.Stat(filepath.Join(m.cfg.PodsDir, "uid-gone", "volumes")); !os.IsNotExist(err) {
		t.Errorf("an orphan's volumes are still there: %v", err)
	}
}

func TestUses(t *testing.T) {
	pod := testPod(
		v1.Volume{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm-vol"}}}},
		v1.Volume{Name: "b", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "sec-proj"}}},
		}}}},
	)
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cm-env"}, Key: "k"}}}}
	for _, tc := range []struct {
		kind, name string
		want       bool
	}{
		{"ConfigMap", "cm-vol", true}, {"Secret", "sec-proj", true}, {"ConfigMap", "cm-env", true},
		{"Secret", "cm-vol", false}, {"ConfigMap", "sec-proj", false}, {"ConfigMap", "other", false},
	} {
		if got := Uses(pod, tc.kind, tc.name); got != tc.want {
			t.Errorf("Uses(%s %s) = %v, want %v", tc.kind, tc.name, got, tc.want)
		}
	}
}
