package agent

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/errdefs"
)

// newRemoteRuntime connects to a CRI runtime over its socket.
func newRemoteRuntime(_ context.Context, cfg *config.Config, _ *slog.Logger) (criRuntime, func(), error) {
	return nil, nil, fmt.Errorf("--container-runtime-endpoint %q: remote CRI runtimes are not supported yet: %w", cfg.ContainerRuntimeEndpoint, errdefs.ErrInvalidArgument)
}
