package agent

import (
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/eviction"
	"github.com/minilet/minilet/internal/images"
)

// The configuration's defaults are options the policy constructors accept.
func TestPolicyDefaultsAreValid(t *testing.T) {
	o := config.NewOptions()
	o.HostnameOverride = "n1"
	o.RootDir = t.TempDir()
	cfg, err := config.Load(o, nil)
	if err != nil {
		t.Fatal(err)
	}

	ec := evictionConfig(cfg)
	if len(ec.Hard) != 4 || len(ec.Soft) != 0 || ec.PressureTransitionPeriod != 5*time.Minute {
		t.Errorf("eviction config from defaults: %+v", ec)
	}
	if _, err := eviction.New(ec, eviction.Deps{
		Stats:      struct{ eviction.Stats }{},
		KillPod:    func(*v1.Pod, v1.PodStatus, int64) error { return nil },
		ActivePods: func() []*v1.Pod { return nil },
	}); err != nil {
		t.Errorf("eviction.New rejects the default configuration: %v", err)
	}

	gc := imageGCConfig(cfg)
	want := images.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
	if gc.Policy != want || gc.Period != 5*time.Minute || gc.StateDir != filepath.Join(o.RootDir, "image-gc") {
		t.Errorf("image GC config from defaults: %+v", gc)
	}
	if _, err := images.NewGC(gc, images.Deps{
		Images:     struct{ images.ImageService }{},
		Containers: struct{ images.ContainerLister }{},
		Disk:       struct{ images.DiskStats }{},
	}); err != nil {
		t.Errorf("images.NewGC rejects the default configuration: %v", err)
	}
}
