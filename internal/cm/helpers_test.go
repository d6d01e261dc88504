package cm

import (
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/cm/cgroups"
)

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func ctr(name string, req, lim v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
}

func mkPod(name string, cs ...v1.Container) *v1.Pod {
	return &v1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Containers: cs},
	}
}

// The seed's example pods.
func seedGuaranteed() *v1.Pod {
	return mkPod("pod-guaranteed-1", ctr("container3", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")))
}

func seedBurstable() *v1.Pod {
	return mkPod("pod-burstable-1",
		ctr("container1", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")),
		ctr("container2", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "2", "memory", "2Gi")))
}

func seedBestEffort() *v1.Pod { return mkPod("pod-besteffort-1", ctr("c", nil, nil)) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// testCgroupRoot is a --cgroup-root unique to the test and process.
func testCgroupRoot(t *testing.T) string {
	return "/minilet-test-" + strconv.Itoa(os.Getpid()) + "-" + unsafeChars.ReplaceAllString(t.Name(), "_")
}

// requireCgroupV1 skips unless running as root on cgroup v1.
func requireCgroupV1(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real cgroups")
	}
	if mode, err := cgroups.Detect(cgroups.DefaultMountRoot); err != nil || mode != cgroups.ModeV1 {
		t.Skipf("needs cgroup v1 (detected %v, %v)", mode, err)
	}
}

// newTestManager builds a manager whose capacity is the seed's 3-core 8G
// machine; cfg fields set by the caller win.
func newTestManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the manager detects the machine's cgroups")
	}
	if cfg.CapacityOverride == nil {
		cfg.CapacityOverride = rl("cpu", "3", "memory", "8Gi", "ephemeral-storage", "100Gi")
	}
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	if cfg.RootDir == "" {
		cfg.RootDir = t.TempDir()
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// startedManager is newTestManager plus Start under a unique real cgroup
// root that is removed (with anything in it) when the test ends.
func startedManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	requireCgroupV1(t)
	cfg.CgroupRoot = testCgroupRoot(t)
	cfg.CgroupsPerQOS = true
	m := newTestManager(t, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Driver().Destroy(ctx, m.root); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func withUID(p *v1.Pod, uid string) *v1.Pod {
	p.UID = types.UID(uid)
	return p
}
