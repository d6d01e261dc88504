package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cluster"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/lifecycle"
	"github.com/minilet/minilet/internal/podsource"
	"github.com/minilet/minilet/internal/podspec"
)

// sourceNames are the pod sources the configuration enables: the loop
// waits for a snapshot from each before it treats runtime pods as orphans.
func sourceNames(cfg *config.Config) []string {
	var out []string
	if cfg.Kubeconfig != "" {
		out = append(out, cluster.SourceAPI)
	}
	if cfg.StaticPodPath != "" {
		out = append(out, podspec.SourceFile)
	}
	if cfg.StaticPodURL != "" {
		out = append(out, podspec.SourceHTTP)
	}
	return out
}

// startSources runs the API server's pod informer (through link), the
// manifest folder and the manifest URL, and merges their snapshots into
// one channel for the sync loop. A manifest that does not parse is a
// Warning event on the node.
func startSources(ctx context.Context, bg *background, cfg *config.Config, link *clusterLink,
	recorder events.Recorder, node *v1.Node, log *slog.Logger) (<-chan lifecycle.Snapshot, error) {
	out := make(chan lifecycle.Snapshot, 4)
	forward := func(updates <-chan podsource.Update) func(context.Context) {
		return func(ctx context.Context) {
			for {
				select {
				case <-ctx.Done():
					return
				case u := <-updates:
					select {
					case out <- lifecycle.Snapshot{Source: u.Source, Pods: u.Pods, Mirrors: u.Mirrors}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}
	if link != nil {
		bg.run(forward(link.cluster.Updates()))
	}
	onError := func(path string, err error) {
		log.Warn("bad pod manifest", "path", path, "err", err)
		recorder.Eventf(node, v1.EventTypeWarning, podsource.ReasonInvalidManifest, "%s: %v", path, err)
	}
	if cfg.StaticPodPath != "" {
		fs, err := podsource.NewFile(podsource.FileConfig{
			NodeName: cfg.NodeName, Path: cfg.StaticPodPath, Period: cfg.FileCheckFrequency,
			// React at once: a file that does not parse yet keeps its
			// last good pods, so a half-written save costs nothing.
			Debounce: time.Millisecond,
			Logger:   log, OnError: onError,
		})
		if err != nil {
			return nil, fmt.Errorf("--pod-manifest-path: %w", err)
		}
		bg.run(func(ctx context.Context) { _ = fs.Run(ctx) })
		bg.run(forward(fs.Updates()))
	}
	if cfg.StaticPodURL != "" {
		hs, err := podsource.NewHTTP(podsource.HTTPConfig{
			NodeName: cfg.NodeName, URL: cfg.StaticPodURL, Header: cfg.StaticPodURLHeader,
			Period: cfg.HTTPCheckFrequency, Logger: log, OnError: onError,
		})
		if err != nil {
			return nil, fmt.Errorf("--manifest-url: %w", err)
		}
		bg.run(func(ctx context.Context) { _ = hs.Run(ctx) })
		bg.run(forward(hs.Updates()))
	}
	return out, nil
}
