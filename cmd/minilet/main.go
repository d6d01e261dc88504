// Command minilet is a small standalone Kubernetes node agent: `minilet
// run` starts the agent; get, describe, logs and top talk to a running one.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/minilet/minilet/internal/agent"
	"github.com/minilet/minilet/internal/cli"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/journald"
)

func main() {
	// Container monitors are this same binary started again; they never
	// reach the CLI.
	embedded.MaybeRunMonitor()

	root := &cobra.Command{
		Use:           "minilet",
		Short:         "A small, standalone Kubernetes node agent",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCommand(), newCleanupCommand())
	cli.AddCommands(root, cli.Options{})
	if err := root.Execute(); err != nil {
		// exec passes on the remote command's exit code, as kubectl does.
		var exit cli.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.Code)
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRunCommand() *cobra.Command {
	opts := config.NewOptions()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: start the pods of --pod-manifest-path and keep them running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(opts, cmd.Flags())
			if err != nil {
				return err
			}
			log := newLogger(cfg.LogLevel)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return agent.Run(ctx, cfg, log)
		},
	}
	config.AddFlags(cmd.Flags(), opts)
	return cmd
}

// newLogger logs structured entries to the journal when the agent runs as
// a systemd service, else text lines to standard error.
func newLogger(level slog.Leveler) *slog.Logger {
	if journald.ToJournal() {
		return slog.New(journald.New("minilet", level, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
