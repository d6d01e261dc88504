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

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/lifecycle"
	"github.com/minilet/minilet/internal/logs"
	"github.com/minilet/minilet/internal/nodestatus"
	"github.com/minilet/minilet/internal/server"
	"github.com/minilet/minilet/internal/store"
)

// listenAPI binds the read-only port (--address:--read-only-port; port 0
// picks a free one).
func listenAPI(cfg *config.Config) (net.Listener, error) {
	addr := net.JoinHostPort(ipString(cfg.Address), strconv.Itoa(cfg.ReadOnlyPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--read-only-port: listening on %s: %w", addr, err)
	}
	return ln, nil
}

// serveAPI serves the read-only API on ln and records its address in
// <root-dir>/minilet.addr for the CLI. A server that fails reports on errc.
func serveAPI(ctx context.Context, bg *background, ln net.Listener, v apiViews, reg *prometheus.Registry, errc chan<- error, log *slog.Logger) error {
	locator := logs.Locator{Pods: v.pods.List, Root: filepath.Join(v.cfg.RootDir, "logs")}
	srv := server.New(server.Config{
		Pods: v, Node: v, Events: v, Logs: locator, Running: locator, Stats: v, Devices: v, Images: v,
		Gatherer: reg,
		Logger:   log,
	})
	if err := server.WriteAddrFile(v.cfg.RootDir, ln.Addr().String()); err != nil {
		_ = ln.Close()
		return fmt.Errorf("recording the API address under --root-dir: %w", err)
	}
	log.Info("serving the read-only API", "address", ln.Addr().String())
	bg.run(func(ctx context.Context) {
		if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			errc <- fmt.Errorf("HTTP API: %w", err)
		}
	})
	return nil
}

// archiveLoader is a runtime that can import image archives (the embedded
// runtime's local store).
type archiveLoader interface {
	LoadArchive(ctx context.Context, r io.Reader) ([]embedded.LoadedImage, error)
}

// serveAdmin serves mutating calls (image load) on <root-dir>/minilet.sock,
// mode 0600, never on the read-only port. A remote runtime pulls its own
// images: no admin socket then.
func serveAdmin(ctx context.Context, bg *background, cfg *config.Config, cri criRuntime, errc chan<- error, log *slog.Logger) error {
	loader, ok := cri.(archiveLoader)
	if !ok {
		return nil
	}
	ln, err := server.ListenAdmin(cfg.RootDir)
	if err != nil {
		return fmt.Errorf("admin socket under --root-dir %s: %w", cfg.RootDir, err)
	}
	adm := server.NewAdmin(server.AdminConfig{Logger: log, Loader: server.ImageLoaderFunc(
		func(ctx context.Context, r io.Reader) ([]server.LoadedImage, error) {
			imgs, err := loader.LoadArchive(ctx, r)
			out := make([]server.LoadedImage, 0, len(imgs))
			for _, i := range imgs {
				out = append(out, server.LoadedImage{ID: i.ID, RepoTags: i.RepoTags})
			}
			return out, err
		})})
	bg.run(func(ctx context.Context) {
		if err := adm.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			errc <- fmt.Errorf("admin socket: %w", err)
		}
	})
	return nil
}

// apiViews shows the subsystems to the read-only API in the shapes its
// endpoints serve.
type apiViews struct {
	cfg     *config.Config
	pods    *lifecycle.Pods
	node    *nodestatus.Builder
	events  *store.Events
	cgroups *cm.Manager
	devices *devicemanager.Manager
	images  *images.GC
	runtime criRuntime
}

var (
	_ server.PodLister       = apiViews{}
	_ server.NodeGetter      = apiViews{}
	_ server.EventLister     = apiViews{}
	_ server.SummaryProvider = apiViews{}
	_ server.DeviceLister    = apiViews{}
	_ server.ImageLister     = apiViews{}
)

// Pods lists every pod with its status.
func (v apiViews) Pods() []v1.Pod { return v.pods.List() }

// Node returns the node as it is now.
func (v apiViews) Node() *v1.Node { return v.node.Node() }

// Events lists recorded events, of one pod when name is given.
func (v apiViews) Events(namespace, name string) ([]v1.Event, error) {
	return v.events.List(namespace, name)
}

// Summary serves the kubelet's Summary API from the cgroups.
func (v apiViews) Summary(ctx context.Context) (*statsapi.Summary, error) {
	list := v.pods.List()
	pods := make([]*v1.Pod, 0, len(list))
	for i := range list {
		pods = append(pods, &list[i])
	}
	return v.cgroups.Summary(ctx, pods)
}

// Devices lists the devices the plugins advertise and who holds them.
func (v apiViews) Devices() []server.Device {
	var out []server.Device
	for _, d := range v.devices.Devices() {
		dev := server.Device{Resource: d.Resource, ID: d.ID, Health: "Healthy", Container: d.Container}
		if !d.Healthy {
			dev.Health = "Unhealthy"
		}
		if d.PodUID != "" {
			if p, ok := v.pods.Pod(d.PodUID); ok {
				dev.Pod = p.Namespace + "/" + p.Name
			}
		}
		out = append(out, dev)
	}
	return out
}

// Images lists the runtime's images now, with what image GC knows of
// them (first detected, last used).
func (v apiViews) Images(ctx context.Context) ([]server.Image, error) {
	list, err := v.runtime.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	known := map[string]images.ImageRecord{}
	for _, r := range v.images.Images() {
		known[r.ID] = r
	}
	out := make([]server.Image, 0, len(list))
	for _, img := range list {
		r := known[img.Id]
		out = append(out, server.Image{
			ID: img.Id, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: img.Size,
			Pinned: img.Pinned, FirstDetected: r.FirstDetected, LastUsed: r.LastUsed,
		})
	}
	return out, nil
}

func ipString(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}

func portOf(addr net.Addr) int {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.Port
	}
	_, p, _ := net.SplitHostPort(addr.String())
	n, _ := strconv.Atoi(p)
	return n
}
