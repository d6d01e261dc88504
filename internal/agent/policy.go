package agent

import (
	"path/filepath"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/eviction"
	"github.com/minilet/minilet/internal/images"
)

// The policy packages take their own options; this file is the one place
// that maps the agent's configuration (KubeletConfiguration and flags)
// onto them.

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
