package agent

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/eviction"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/lifecycle"
	"github.com/minilet/minilet/internal/nodeshutdown"
)

// The policy packages take their own options; this file is the one place
// that maps the agent's configuration (KubeletConfiguration and flags)
// onto them.

// cgroupConfig is the cgroup manager's part of the configuration; the
// device manager's resources count in capacity and allocatable.
func cgroupConfig(cfg *config.Config, devices *devicemanager.Manager, recorder events.Recorder, log *slog.Logger) cm.Config {
	evictionHard := map[string]string{}
	for _, t := range cfg.EvictionHard {
		evictionHard[string(t.Signal)] = t.Value.String()
	}
	return cm.Config{
		NodeName:               cfg.NodeName,
		RootDir:                cfg.RootDir,
		Owner:                  cfg.RootDir,
		CgroupRoot:             cfg.CgroupRoot,
		CgroupsPerQOS:          cfg.CgroupsPerQOS,
		CgroupDriver:           cfg.CgroupDriver,
		MaxPods:                int64(cfg.MaxPods),
		KubeReserved:           cfg.KubeReserved,
		SystemReserved:         cfg.SystemReserved,
		EvictionHard:           evictionHard,
		EnforceNodeAllocatable: cfg.EnforceNodeAllocatable,
		PodPidsLimit:           cfg.PodPidsLimit,
		Extended:               devices,
		Logger:                 log,
		Recorder:               recorder,
	}
}

// evictionConfig takes the eviction thresholds and periods from the
// configuration; the monitoring interval and pod cleanup timeout keep
// the eviction package's defaults.
func evictionConfig(cfg *config.Config) eviction.Config {
	return eviction.Config{
		Hard:                     cfg.EvictionHard,
		Soft:                     cfg.EvictionSoft,
		PressureTransitionPeriod: cfg.EvictionPressureTransitionPeriod,
		MaxPodGracePeriod:        cfg.EvictionMaxPodGracePeriod,
	}
}

// imageGCConfig takes the image GC policy and period from the
// configuration and keeps GC's state under the root directory; the
// detection period keeps the images package's default.
func imageGCConfig(cfg *config.Config) images.Config {
	return images.Config{
		Policy: images.Policy{
			HighThresholdPercent: cfg.ImageGCHighThresholdPercent,
			LowThresholdPercent:  cfg.ImageGCLowThresholdPercent,
			MinAge:               cfg.ImageMinimumGCAge,
			MaxAge:               cfg.ImageMaximumGCAge,
		},
		Period:   cfg.ImageGCPeriod,
		StateDir: filepath.Join(cfg.RootDir, "image-gc"),
	}
}

// newEviction builds the eviction manager over the host's statistics and
// the pods' usage from their cgroups.
func newEviction(cfg *config.Config, deps eviction.Deps, cgroups *cm.Manager) (*eviction.Manager, error) {
	stats, err := eviction.NewHostStats(eviction.HostStatsConfig{
		RootDir:  cfg.RootDir,
		PodUsage: eviction.SummaryPodUsage(cgroups.Summary),
	})
	if err != nil {
		return nil, fmt.Errorf("eviction stats: %w", err)
	}
	deps.Stats = stats
	m, err := eviction.New(evictionConfig(cfg), deps)
	if err != nil {
		return nil, fmt.Errorf("eviction: %w", err)
	}
	return m, nil
}

// newNodeShutdown builds graceful node shutdown from its three fields; with
// none set it is off and needs no logind.
func newNodeShutdown(cfg *config.Config, pods *lifecycle.Pods, workers lifecycle.PodWorkers, rec events.Recorder, node runtime.Object, clk clock.WithTicker, log *slog.Logger) (*nodeshutdown.Manager, error) {
	nc := nodeshutdown.Config{
		Period: cfg.ShutdownGracePeriod, CriticalPeriod: cfg.ShutdownGracePeriodCriticalPods,
		KillPod: lifecycle.Evict(pods, workers), ActivePods: pods.Active,
		Recorder: rec, Node: node, Clock: clk, Logger: log,
	}
	for _, p := range cfg.ShutdownGracePeriodByPodPriority {
		nc.ByPriority = append(nc.ByPriority, nodeshutdown.PriorityPeriod{Priority: p.Priority, Period: p.Period})
	}
	if nc.Period > 0 || len(nc.ByPriority) > 0 {
		lg, err := nodeshutdown.ConnectLogind()
		if err != nil {
			return nil, fmt.Errorf("shutdownGracePeriod: graceful node shutdown needs systemd-logind on the system bus: %w", err)
		}
		nc.Logind = lg
	}
	m, err := nodeshutdown.New(nc)
	if err != nil {
		return nil, fmt.Errorf("graceful node shutdown: %w", err)
	}
	return m, nil
}
