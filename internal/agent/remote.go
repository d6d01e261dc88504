package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/cri/remote"
)

// newRemoteRuntime connects to a CRI runtime over its socket
// (--container-runtime-endpoint), bounding every call by
// --runtime-request-timeout. A runtime that is not up yet is waited for
// briefly; one that goes away later is reconnected to by the client while
// the node reports Ready=False.
func newRemoteRuntime(ctx context.Context, cfg *config.Config, log *slog.Logger) (criRuntime, func(), error) {
	remote.RouteClientLogs(log.With("component", "cri-client"))
	rt, err := remote.New(ctx, remote.Config{
		Endpoint:       cfg.ContainerRuntimeEndpoint,
		RequestTimeout: cfg.RuntimeRequestTimeout,
		StartupWait:    startupWait,
		Logger:         log.With("component", "cri"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("--container-runtime-endpoint: %w", err)
	}
	return rt, func() { _ = rt.Close(context.Background()) }, nil
}

// startupWait is how long a starting agent waits for its runtime to answer.
const startupWait = 30 * time.Second
