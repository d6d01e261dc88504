package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/minilet/minilet/internal/agent"
	"github.com/minilet/minilet/internal/cleanup"
	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
)

// newCleanupCommand is `minilet cleanup`: with the flags (and --config)
// an agent ran with, it removes what that agent created on the host once
// it is stopped for good.
func newCleanupCommand() *cobra.Command {
	opts := config.NewOptions()
	stopPods := false
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what a stopped agent created on the host (give it the flags you gave run)",
		Long: `Remove what the agent of --root-dir created on the host, once it is stopped:
its pods' leftovers (with --stop-pods, pods still running), its cgroups
below --cgroup-root (the monitors' too), its root dir (state, keys, images),
its lock files, its files in --device-plugin-dir, and the default CNI network
it wrote into --cni-conf-dir with its IP store, bridge and host-port chains,
unless another agent's or runtime's pods still use them. Give it the flags
(or --config) the agent ran with. It refuses while an agent runs on the
root dir, and while pods run unless --stop-pods.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(opts, cmd.Flags())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := cleanup.Run(ctx, cleanup.Config{
				RootDir:                  cfg.RootDir,
				RootLock:                 agent.RootLockName,
				CgroupRoot:               cfg.CgroupRoot,
				CgroupDriver:             cfg.CgroupDriver,
				CgroupLockDir:            cm.DefaultLockDir,
				DevicePluginDir:          cfg.DevicePluginDir,
				CNIConfDir:               cfg.CNIConfDir,
				CNIBinDirs:               cfg.CNIBinDirs,
				CNICacheDir:              cfg.CNICacheDir,
				ContainerRuntimeEndpoint: cfg.ContainerRuntimeEndpoint,
				StopPods:                 stopPods,
				Logger:                   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
			})
			if rep != nil && (err == nil || len(rep.Removed)+len(rep.Left) > 0) {
				rep.Print(cmd.OutOrStdout())
			}
			if err != nil {
				return fmt.Errorf("cleanup: %w", err)
			}
			return nil
		},
	}
	config.AddFlags(cmd.Flags(), opts)
	cmd.Flags().BoolVar(&stopPods, "stop-pods", false, "stop and remove pods that still run instead of refusing")
	return cmd
}
