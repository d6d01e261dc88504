package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/volumes"
)

func TestPullPolicyDefaults(t *testing.T) {
	cases := map[string]v1.PullPolicy{
		"busybox":                   v1.PullAlways,
		"busybox:latest":            v1.PullAlways,
		"busybox:1.36":              v1.PullIfNotPresent,
		"localhost:5000/app":        v1.PullAlways,
		"localhost:5000/app:v2":     v1.PullIfNotPresent,
		"busybox@sha256:0123456789": v1.PullIfNotPresent,
	}
	for image, want := range cases {
		if got := pullPolicy(&v1.Container{Image: image}); got != want {
			t.Errorf("pullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func imagePod(image string, policy v1.PullPolicy) *v1.Pod {
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.Containers[0].Image = image
	pod.Spec.Containers[0].ImagePullPolicy = policy
	return pod
}

func TestImagePresentIsNotPulled(t *testing.T) {
	e := newEnv(t)
	e.images.SetFakeImages([]string{"busybox:1.36"})
	if res := e.sync(imagePod("busybox:1.36", v1.PullIfNotPresent)); res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("sync: %+v", res)
	}
	for _, c := range e.images.Called {
		if c == "PullImage" {
			t.Fatalf("pulled a present image")
		}
	}
	if !e.rec.Has(`Normal Pulled Container image "busybox:1.36" already present on machine`) {
		t.Fatalf("events:\n%s", e.rec)
	}
}

func TestImagePulled(t *testing.T) {
	e := newEnv(t)
	e.images.SetFakeImages(nil)
	e.images.SetFakeImageSize(4096)
	pod := imagePod("busybox:1.36", "")
	if res := e.sync(pod); res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("sync: %+v", res)
	}
	// The fake clock does not move during the pull.
	if !e.rec.Has(`Normal Pulling Pulling image "busybox:1.36"`) ||
		!e.rec.Has(`Normal Pulled Successfully pulled image "busybox:1.36" in 0s (0s including waiting). Image size: 4096 bytes.`) {
		t.Fatalf("events:\n%s", e.rec)
	}
	if e.status(pod).state("a") != container.StateRunning {
		t.Fatalf("container not running after the pull")
	}
}

func TestImageNeverPull(t *testing.T) {
	e := newEnv(t)
	e.images.SetFakeImages(nil)
	res := e.sync(imagePod("busybox:1.36", v1.PullNever))
	if w := res.Waiting["a"]; w.Reason != "ErrImageNeverPull" || w.Message != `Container image "busybox:1.36" is not present with pull policy of Never` {
		t.Fatalf("waiting = %+v", w)
	}
	if !e.rec.Has("Warning ErrImageNeverPull") {
		t.Fatalf("events:\n%s", e.rec)
	}
}

// TestImagePullBackOff follows a failing pull the way `get pods -w` shows
// it: ErrImagePull on each failed attempt, then ImagePullBackOff (with the
// last error and a "Back-off pulling image" event) while the back-off
// (10 s, 20 s, 40 s) runs, each sync asking for the next one in time; once
// the registry answers, the pull works.
func TestImagePullBackOff(t *testing.T) {
	e := newEnv(t)
	e.images.SetFakeImages(nil)
	pod := imagePod("registry.invalid/app:v1", "")
	const image = `"registry.invalid/app:v1"`
	for _, backoff := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		e.images.InjectError("PullImage", errors.New("dial tcp: no such host")) // one call
		res := e.sync(pod)
		if w := res.Waiting["a"]; w.Reason != "ErrImagePull" || !strings.Contains(w.Message, "no such host") {
			t.Fatalf("failed attempt (back-off %s): %+v", backoff, res)
		}
		shown := min(backoff/2, 10*time.Second)
		if res.RequeueAfter != shown {
			t.Fatalf("after a failed pull: requeue %s, want %s so that ImagePullBackOff is shown", res.RequeueAfter, shown)
		}
		e.clock.Step(shown)
		res = e.sync(pod)
		w := res.Waiting["a"]
		if w.Reason != "ImagePullBackOff" || w.Message != `Back-off pulling image `+image+`: ErrImagePull: dial tcp: no such host` {
			t.Fatalf("while backing off %s: %+v", backoff, res)
		}
		if res.RequeueAfter != backoff-shown {
			t.Fatalf("while backing off %s: requeue %s, want %s (the next attempt)", backoff, res.RequeueAfter, backoff-shown)
		}
		e.clock.Step(res.RequeueAfter)
	}
	for _, want := range []string{
		`Warning Failed Failed to pull image ` + image + `: dial tcp: no such host`,
		`Warning Failed Error: ErrImagePull`,
		`Normal BackOff Back-off pulling image ` + image,
		`Warning Failed Error: ImagePullBackOff`,
	} {
		if !e.rec.Has(want) {
			t.Fatalf("no event %q:\n%s", want, e.rec)
		}
	}
	// Once the back-off is over the pull is tried again (and now works).
	if res := e.sync(pod); len(res.Waiting) != 0 || res.Err != nil {
		t.Fatalf("after back-off: %+v", res)
	}
}

func TestConfigMapAndSecretRefsFail(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a", "b")
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
	pod.Spec.Containers[1].Env = []v1.EnvVar{
		{Name: "OPT", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "k", Optional: ptr(true)}}},
		{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "pw"}}},
	}
	res := e.sync(pod)
	for _, n := range []string{"a", "b"} {
		if w := res.Waiting[n]; w.Reason != "CreateContainerConfigError" {
			t.Fatalf("container %s waiting = %+v", n, w)
		}
	}
	if !strings.Contains(res.Waiting["b"].Message, `secret "db"`) || !e.rec.Has("Warning Failed Error: ") {
		t.Fatalf("result %+v events:\n%s", res, e.rec)
	}
}

func TestVolumes(t *testing.T) {
	e := newEnv(t)
	hostDir := t.TempDir()
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "data", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(hostDir, "new"), Type: ptr(v1.HostPathDirectoryOrCreate)}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "data", MountPath: "/data", ReadOnly: true}}
	// The lifecycle syncer sets volumes up before containers start.
	vm, err := volumes.New(volumes.Config{PodsDir: e.cfg.PodsDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Setup(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	mounts, err := e.m.makeMounts(pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	wantEmpty := filepath.Join(e.cfg.PodsDir, "uid-1", "volumes", "kubernetes.io~empty-dir", "scratch")
	if len(mounts) != 2 || mounts[0].HostPath != wantEmpty || mounts[0].ContainerPath != "/scratch" ||
		mounts[1].HostPath != filepath.Join(hostDir, "new") || !mounts[1].Readonly {
		t.Fatalf("mounts = %+v", mounts)
	}
	for _, d := range []string{wantEmpty, filepath.Join(hostDir, "new")} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s not created: %v", d, err)
		}
	}

	// subPathExpr: expanded with the container's env, kept inside the volume.
	c := pod.Spec.Containers[0].DeepCopy()
	c.VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/logs", SubPathExpr: "$(POD)/logs"}}
	mounts, err = e.m.makeMounts(pod, c, map[string]string{"POD": "web-1"})
	if err != nil || len(mounts) != 1 || mounts[0].HostPath != filepath.Join(wantEmpty, "web-1", "logs") {
		t.Fatalf("subPathExpr mounts = %+v, %v", mounts, err)
	}
	if fi, err := os.Stat(filepath.Join(wantEmpty, "web-1", "logs")); err != nil || !fi.IsDir() {
		t.Errorf("subPathExpr directory not created: %v", err)
	}
	_, err = e.m.makeMounts(pod, c, map[string]string{"POD": "../../etc"})
	if err == nil || !strings.Contains(err.Error(), `subPathExpr "../../etc/logs" must be a relative path inside the volume`) {
		t.Errorf("an escaping subPathExpr: %v", err)
	}

	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/"}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "share", MountPath: "/share"})
	res := e.sync(pod)
	if w := res.Waiting["a"]; w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, `volume "share": nfs volumes are not supported`) {
		t.Fatalf("waiting = %+v", w)
	}
}

func TestGarbageCollect(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	e.sync(pod)
	for range 3 {
		e.exit(pod, "a", 1)
		e.clock.Step(10 * time.Minute) // past any back-off
		e.sync(pod)
	}
	if n := e.status(pod).attempts("a"); n != 4 {
		t.Fatalf("%d attempts, want 4", n)
	}
	// Log files of dead attempts go with them.
	logDir := filepath.Join(e.cfg.LogRoot, "default_web_uid-1", "a")
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(logDir, string(rune('0'+i))+".log"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	alive := func(types.UID) bool { return false }
	if err := e.m.GarbageCollect(ctx, 1, alive); err != nil {
		t.Fatal(err)
	}
	v := e.status(pod)
	if v.attempts("a") != 2 || v.state("a") != container.StateRunning {
		t.Fatalf("after GC: %+v, want the running attempt and the newest dead one", v.ps.Containers)
	}
	for i, want := range []bool{false, false, true, true} {
		_, err := os.Stat(filepath.Join(logDir, string(rune('0'+i))+".log"))
		if (err == nil) != want {
			t.Fatalf("log %d.log exists=%v, want %v", i, err == nil, want)
		}
	}

	// The pod is deleted: kill it, then GC removes everything it left.
	if err := e.m.KillPod(ctx, pod, v.ps, ptr(int64(0))); err != nil {
		t.Fatal(err)
	}
	gone := func(uid types.UID) bool { return uid == pod.UID }
	if err := e.m.GarbageCollect(ctx, 1, gone); err != nil {
		t.Fatal(err)
	}
	pods, err := e.m.GetPods(ctx)
	if err != nil || len(pods) != 0 {
		t.Fatalf("GetPods after GC = %v, %v; want nothing", pods, err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.LogRoot, "default_web_uid-1")); !os.IsNotExist(err) {
		t.Fatalf("pod log dir still there: %v", err)
	}
}

func TestGetPods(t *testing.T) {
	e := newEnv(t)
	p1 := mkPod(v1.RestartPolicyAlways, nil, "a", "b")
	p2 := mkPod(v1.RestartPolicyAlways, nil, "c")
	p2.Name, p2.UID = "db", "uid-2"
	e.sync(p1)
	e.sync(p2)
	pods, err := e.m.GetPods(context.Background())
	if err != nil || len(pods) != 2 {
		t.Fatalf("GetPods = %v, %v", pods, err)
	}
	if pods[0].UID != "uid-1" || pods[0].Name != "web" || len(pods[0].Containers) != 2 || len(pods[0].Sandboxes) != 1 ||
		pods[1].Name != "db" || pods[1].Containers[0].Name != "c" || pods[1].Containers[0].State != container.StateRunning {
		t.Fatalf("pods = %+v %+v", pods[0], pods[1])
	}
}

func TestInvalidImageName(t *testing.T) {
	e := newEnv(t)
	e.images.SetFakeImages(nil)
	for _, image := range []string{"Busybox:1.36", "busy box", "registry:5000/app:bad tag", "app@sha256:short"} {
		res := e.sync(imagePod(image, ""))
		w := res.Waiting["a"]
		if w.Reason != "InvalidImageName" || !strings.Contains(w.Message, `Failed to apply default image tag "`+image+`"`) {
			t.Errorf("%q: waiting = %+v", image, w)
		}
	}
	if !e.rec.Has("Warning InspectFailed Failed to apply default image tag") {
		t.Fatalf("events:\n%s", e.rec)
	}
	for _, c := range e.images.Called {
		if c == "PullImage" || c == "ImageStatus" {
			t.Fatalf("the runtime was asked about an invalid image name: %v", e.images.Called)
		}
	}
}

func TestPullParallelism(t *testing.T) {
	cases := []struct {
		serialize bool
		max, want int
	}{{true, 0, 1}, {true, 1, 1}, {false, 0, -1}, {false, 3, 3}}
	for _, tc := range cases {
		if got := PullParallelism(tc.serialize, tc.max); got != tc.want {
			t.Errorf("PullParallelism(%v, %d) = %d, want %d", tc.serialize, tc.max, got, tc.want)
		}
	}
}

// gatedImages blocks every PullImage until the test lets it finish and
// records how many ran at once.
type gatedImages struct {
	Images
	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	entered     chan string
	release     chan struct{}
}

func (g *gatedImages) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	g.mu.Lock()
	g.inFlight++
	g.maxInFlight = max(g.maxInFlight, g.inFlight)
	g.mu.Unlock()
	g.entered <- spec.GetImage()
	<-g.release
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return g.Images.PullImage(ctx, spec, auth, sb)
}

func pullConcurrently(t *testing.T, parallel int) *gatedImages {
	t.Helper()
	fake := critest.NewFakeImageService()
	fake.SetFakeImages(nil)
	g := &gatedImages{Images: fake, entered: make(chan string, 2), release: make(chan struct{})}
	e := newEnv(t, func(c *Config) { c.Images = g; c.MaxParallelImagePulls = parallel })
	var wg sync.WaitGroup
	for i, image := range []string{"app-one:v1", "app-two:v1"} {
		pod := imagePod(image, v1.PullAlways)
		pod.UID = types.UID(fmt.Sprintf("uid-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if reason, msg, _ := e.m.ensureImage(context.Background(), pod, &pod.Spec.Containers[0], nil); reason != "" {
				t.Errorf("ensureImage(%s) = %s %s", image, reason, msg)
			}
		}()
	}
	t.Cleanup(wg.Wait)
	return g
}

func TestImagePullsAreSerializedByDefault(t *testing.T) {
	g := pullConcurrently(t, 0)
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("a pull never started")
		}
		g.release <- struct{}{} // let this pull finish before the other may start
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maxInFlight != 1 {
		t.Fatalf("%d pulls ran at once, want 1 (serialized)", g.maxInFlight)
	}
}

func TestImagePullsInParallelWhenAllowed(t *testing.T) {
	g := pullConcurrently(t, 2)
	// Both pulls must be in flight together: neither is released before
	// the other has started.
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the second pull waited for the first although 2 may run at once")
		}
	}
	close(g.release)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maxInFlight != 2 {
		t.Fatalf("maxInFlight = %d, want 2", g.maxInFlight)
	}
}
