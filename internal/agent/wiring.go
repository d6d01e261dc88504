package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/podsource"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/prober"
	"github.com/minilet/minilet/internal/server"
	"github.com/minilet/minilet/internal/store"
)

// startEvents builds the event pipeline: a recorder for every component,
// the broadcaster, a log sink and the local store. The returned function
// flushes and closes it.
func (a *Agent) startEvents(ctx context.Context, reg prometheus.Registerer) (func(), error) {
	st, err := store.OpenEvents(store.EventsConfig{Dir: a.cfg.RootDir}, a.clock, a.log)
	if err != nil {
		return nil, fmt.Errorf("opening the event store under --root-dir %s: %w", a.cfg.RootDir, err)
	}
	a.events = st
	b, err := events.NewBroadcaster(events.Config{Registerer: reg}, a.clock, a.log)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	b.AddSink(events.NewLogSink(a.log))
	b.AddSink(events.NewStoreSink(st))
	b.Start(ctx)
	a.broadcaster = b
	a.recorder = b.NewRecorder(v1.EventSource{Component: "minilet", Host: a.cfg.NodeName})
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.Shutdown(sctx); err != nil {
			a.log.Warn("event flush incomplete", "err", err)
		}
		if err := st.Close(); err != nil {
			a.log.Warn("closing the event store", "err", err)
		}
	}, nil
}

// newRuntime returns the embedded runtime, or (later) a CRI client when
// --container-runtime-endpoint is set.
func newRuntime(ctx context.Context, cfg *config.Config, nodeIP string, log *slog.Logger) (criRuntime, func(), error) {
	if cfg.ContainerRuntimeEndpoint != "" {
		return newRemoteRuntime(ctx, cfg, log)
	}
	rt, err := embedded.New(embedded.Config{RootDir: cfg.RootDir, Logger: log, PinnedImages: cfg.PinnedImages, NodeIP: nodeIP})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the embedded runtime: %w", err)
	}
	return rt, func() { _ = rt.Close(context.Background()) }, nil
}

// startDevices runs the device plugin registration server.
func (a *Agent) startDevices(ctx context.Context, log *slog.Logger) error {
	m, err := devicemanager.New(devicemanager.Config{
		PluginDir:          a.cfg.DevicePluginDir,
		PodResourcesSocket: filepath.Join(a.cfg.RootDir, "pod-resources", "kubelet.sock"),
	}, devicemanager.PodListerFunc(a.pods.active), a.clock, log)
	if err != nil {
		return fmt.Errorf("--device-plugin-dir: %w", err)
	}
	if err := m.Start(ctx); err != nil {
		return fmt.Errorf("starting the device manager in --device-plugin-dir %s: %w", a.cfg.DevicePluginDir, err)
	}
	a.bg.Add(1)
	go func() { defer a.bg.Done(); <-ctx.Done(); m.Stop() }()
	a.devmgr, a.devices = m, m
	return nil
}

// deviceResources adapts the device manager to the cgroup manager's view
// of extended resources.
type deviceResources struct{ m *devicemanager.Manager }

func (d deviceResources) Allocatable() v1.ResourceList {
	return d.m.Allocatable()
}

// startCgroups creates the kubepods hierarchy under --cgroup-root.
func (a *Agent) startCgroups(ctx context.Context, log *slog.Logger) error {
	evictionHard := map[string]string{}
	for _, t := range a.cfg.EvictionHard {
		evictionHard[string(t.Signal)] = t.Value.String()
	}
	m, err := cm.New(cm.Config{
		NodeName:               a.cfg.NodeName,
		RootDir:                a.cfg.RootDir,
		CgroupRoot:             a.cfg.CgroupRoot,
		CgroupsPerQOS:          a.cfg.CgroupsPerQOS,
		CgroupDriver:           a.cfg.CgroupDriver,
		MaxPods:                int64(a.cfg.MaxPods),
		KubeReserved:           a.cfg.KubeReserved,
		SystemReserved:         a.cfg.SystemReserved,
		EvictionHard:           evictionHard,
		EnforceNodeAllocatable: a.cfg.EnforceNodeAllocatable,
		PodPidsLimit:           a.cfg.PodPidsLimit,
		Extended:               deviceResources{a.devmgr},
		Logger:                 log,
		Recorder:               a.recorder,
	})
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	a.cm, a.cgroups = m, m
	return nil
}

// startProber runs the probe manager; exec probes go through the runtime.
func (a *Agent) startProber(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) error {
	m, err := prober.NewManager(prober.Config{
		Status:     a.pods,
		Execer:     execer{a},
		Recorder:   a.recorder,
		Logger:     log,
		Registerer: reg,
		LastReadiness: func(containerID string) bool {
			return a.pods.saved.wasReady(containerID)
		},
	})
	if err != nil {
		return err
	}
	m.Start(ctx)
	a.bg.Add(1)
	go func() { defer a.bg.Done(); <-ctx.Done(); m.Stop() }()
	a.probeMgr, a.prober = m, m
	return nil
}

// startServer listens on --address:--read-only-port and records the
// address in <root-dir>/minilet.addr for the CLI.
func (a *Agent) startServer(ctx context.Context, wg *sync.WaitGroup, reg *prometheus.Registry, errc chan<- error) error {
	addr := net.JoinHostPort(ipString(a.cfg.Address), strconv.Itoa(a.cfg.ReadOnlyPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--read-only-port: listening on %s: %w", addr, err)
	}
	a.port = portOf(ln.Addr())
	srv := server.New(server.Config{
		Pods: a, Node: a, Events: a, Logs: a, Running: a, Stats: a, Devices: a, Images: a,
		Gatherer: reg,
		Logger:   a.log,
	})
	if err := server.WriteAddrFile(a.cfg.RootDir, ln.Addr().String()); err != nil {
		_ = ln.Close()
		return fmt.Errorf("recording the API address under --root-dir: %w", err)
	}
	a.log.Info("serving the read-only API", "address", ln.Addr().String())
	if err := a.startAdmin(ctx, wg, errc); err != nil {
		_ = ln.Close()
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			errc <- fmt.Errorf("HTTP API: %w", err)
		}
	}()
	return nil
}

// startSources runs the file (and URL) sources and merges their snapshots
// into one channel for the sync loop.
func (a *Agent) startSources(ctx context.Context, wg *sync.WaitGroup) (<-chan sourceSnapshot, error) {
	out := make(chan sourceSnapshot, 4)
	if err := a.startCluster(ctx, wg, out); err != nil {
		return nil, err
	}
	onError := func(path string, err error) {
		a.log.Warn("bad pod manifest", "path", path, "err", err)
		a.recorder.Eventf(a.nodeRef(), v1.EventTypeWarning, podsource.ReasonInvalidManifest, "%s: %v", path, err)
	}
	forward := func(updates <-chan podsource.Update) {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case u := <-updates:
				select {
				case out <- sourceSnapshot{source: u.Source, pods: u.Pods}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
	if a.cfg.StaticPodPath != "" {
		fs, err := podsource.NewFile(podsource.FileConfig{
			NodeName: a.cfg.NodeName, Path: a.cfg.StaticPodPath, Period: a.cfg.FileCheckFrequency,
			// React at once: a file that does not parse yet keeps its
			// last good pods, so a half-written save costs nothing.
			Debounce: time.Millisecond,
			Logger:   a.log, OnError: onError,
		})
		if err != nil {
			return nil, fmt.Errorf("--pod-manifest-path: %w", err)
		}
		a.sources = append(a.sources, podspec.SourceFile)
		wg.Add(2)
		go func() { defer wg.Done(); _ = fs.Run(ctx) }()
		go forward(fs.Updates())
	}
	if a.cfg.StaticPodURL != "" {
		hs, err := podsource.NewHTTP(podsource.HTTPConfig{
			NodeName: a.cfg.NodeName, URL: a.cfg.StaticPodURL, Header: a.cfg.StaticPodURLHeader,
			Period: a.cfg.HTTPCheckFrequency, Logger: a.log, OnError: onError,
		})
		if err != nil {
			return nil, fmt.Errorf("--manifest-url: %w", err)
		}
		a.sources = append(a.sources, podspec.SourceHTTP)
		wg.Add(2)
		go func() { defer wg.Done(); _ = hs.Run(ctx) }()
		go forward(hs.Updates())
	}
	return out, nil
}

// nodeRef is the object events about the node (and about manifests that
// are not pods) are recorded on.
func (a *Agent) nodeRef() *v1.Node {
	n := &v1.Node{}
	n.Name = a.cfg.NodeName
	n.UID = types.UID(a.cfg.NodeName)
	return n
}

// archiveLoader is a runtime that can import image archives (the embedded
// runtime's local store).
type archiveLoader interface {
	LoadArchive(ctx context.Context, r io.Reader) ([]embedded.LoadedImage, error)
}

// startAdmin serves mutating calls (image load) on <root-dir>/minilet.sock,
// mode 0600, never on the read-only port.
func (a *Agent) startAdmin(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) error {
	loader, ok := a.cri.(archiveLoader)
	if !ok {
		return nil // a remote runtime pulls its own images
	}
	ln, err := server.ListenAdmin(a.cfg.RootDir)
	if err != nil {
		return fmt.Errorf("admin socket under --root-dir %s: %w", a.cfg.RootDir, err)
	}
	adm := server.NewAdmin(server.AdminConfig{Logger: a.log, Loader: server.ImageLoaderFunc(
		func(ctx context.Context, r io.Reader) ([]server.LoadedImage, error) {
			imgs, err := loader.LoadArchive(ctx, r)
			out := make([]server.LoadedImage, 0, len(imgs))
			for _, i := range imgs {
				out = append(out, server.LoadedImage{ID: i.ID, RepoTags: i.RepoTags})
			}
			return out, err
		})})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := adm.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			errc <- fmt.Errorf("admin socket: %w", err)
		}
	}()
	return nil
}
