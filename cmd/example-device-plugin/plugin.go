package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Config describes the devices the plugin serves and where.
type Config struct {
	Resource        string   // extended resource name, e.g. example.com/dev
	PluginDir       string   // holds kubelet.sock and our socket
	SocketName      string   // our socket's file name in PluginDir
	DevicesFile     string   // one device ID per line, "ID unhealthy" marks it unhealthy; re-read on change
	Devices         []string // static healthy device IDs, used when DevicesFile is empty
	DeviceNode      string   // optional host device node handed to containers as /dev/<resource name>-<ID>
	RegisterTimeout time.Duration
	// RegisterDelay makes the plugin slow: it waits this long before
	// every registration (to test agents against plugins that come back
	// late after a restart). Default 0.
	RegisterDelay time.Duration
}

// plugin is a device plugin whose devices come from flags or a file.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	devs    []*pluginapi.Device
	changed chan struct{} // closed and replaced whenever devs change

	srv  *grpc.Server
	lis  *net.UnixListener
	done chan struct{} // closed when srv.Serve returns
}

func newPlugin(cfg Config, log *slog.Logger) (*plugin, error) {
	if cfg.Resource == "" || !strings.Contains(cfg.Resource, "/") {
		return nil, fmt.Errorf("--resource %q must be an extended resource name like example.com/dev", cfg.Resource)
	}
	if cfg.PluginDir == "" {
		return nil, errors.New("--plugin-dir is required")
	}
	if cfg.SocketName == "" {
		cfg.SocketName = strings.NewReplacer("/", "-", ".", "-").Replace(cfg.Resource) + ".sock"
	}
	if cfg.DevicesFile == "" && len(cfg.Devices) == 0 {
		return nil, errors.New("one of --devices-file or --devices is required")
	}
	if cfg.DevicesFile != "" {
		abs, err := filepath.Abs(cfg.DevicesFile)
		if err != nil {
			return nil, fmt.Errorf("--devices-file %q: %w", cfg.DevicesFile, err)
		}
		cfg.DevicesFile = abs
	}
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = 10 * time.Second
	}
	return &plugin{cfg: cfg, log: log, changed: make(chan struct{})}, nil
}

func (p *plugin) socketPath() string  { return filepath.Join(p.cfg.PluginDir, p.cfg.SocketName) }
func (p *plugin) kubeletPath() string { return filepath.Join(p.cfg.PluginDir, "kubelet.sock") }

// run serves until ctx ends: it registers, re-reads the devices file when
// it changes, and serves and registers again when the agent restarts
// (kubelet.sock re-created, or our socket wiped).
func (p *plugin) run(ctx context.Context) error {
	p.reload()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(p.cfg.PluginDir); err != nil {
		return fmt.Errorf("watch --plugin-dir %s: %w", p.cfg.PluginDir, err)
	}
	if p.cfg.DevicesFile != "" {
		// Watch the directory: editors replace files by renaming.
		if err := w.Add(filepath.Dir(p.cfg.DevicesFile)); err != nil {
			return fmt.Errorf("watch --devices-file %s: %w", p.cfg.DevicesFile, err)
		}
	}
	if err := p.serve(); err != nil {
		return err
	}
	defer p.stopServing(true)
	p.register(ctx)

	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			p.log.Warn("watch failed", "err", err)
		case ev := <-w.Events:
			switch {
			case ev.Name == p.cfg.DevicesFile:
				p.reload()
			case ev.Name == p.kubeletPath() && ev.Has(fsnotify.Create):
				p.log.Info("kubelet.sock created; registering again")
				p.register(ctx)
			case ev.Name == p.socketPath() && ev.Has(fsnotify.Remove|fsnotify.Rename):
				if _, err := os.Stat(p.socketPath()); err == nil {
					continue // our own restart
				}
				p.log.Info("our socket was removed (agent restart); serving and registering again")
				p.stopServing(false)
				if err := p.serve(); err != nil {
					return err
				}
				p.register(ctx)
			}
		}
	}
}

// serve listens on our socket and serves the DevicePlugin service.
func (p *plugin) serve() error {
	if err := os.Remove(p.socketPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.socketPath(), Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.socketPath(), err)
	}
	lis.SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	p.srv, p.lis, p.done = srv, lis, done
	return nil
}

func (p *plugin) stopServing(removeSocket bool) {
	if p.srv == nil {
		return
	}
	p.srv.Stop()
	<-p.done
	p.srv = nil
	if removeSocket {
		_ = os.Remove(p.socketPath())
	}
}

// register announces us on kubelet.sock; failures are logged and retried
// when kubelet.sock appears again.
func (p *plugin) register(ctx context.Context) {
	if _, err := os.Stat(p.kubeletPath()); err != nil {
		p.log.Info("kubelet.sock not there yet; waiting for it", "path", p.kubeletPath())
		return
	}
	if d := p.cfg.RegisterDelay; d > 0 {
		p.log.Info("waiting before registering (--register-delay)", "delay", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RegisterTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+p.kubeletPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.log.Error("dial kubelet.sock failed", "err", err)
		return
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: p.cfg.Resource,
		Options:      &pluginapi.DevicePluginOptions{},
	}, grpc.WaitForReady(true))
	if err != nil {
		p.log.Error("registration failed", "err", err)
		return
	}
	p.log.Info("registered", "resource", p.cfg.Resource, "socket", p.socketPath())
}

// reload reads the devices and wakes the ListAndWatch streams.
func (p *plugin) reload() {
	var devs []*pluginapi.Device
	if p.cfg.DevicesFile == "" {
		for _, id := range p.cfg.Devices {
			devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
		}
	} else {
		raw, err := os.ReadFile(p.cfg.DevicesFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("reading the devices file failed; keeping the last list", "path", p.cfg.DevicesFile, "err", err)
			return
		}
		devs = parseDevices(raw)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sameDevices(p.devs, devs) {
		return
	}
	p.devs = devs
	close(p.changed)
	p.changed = make(chan struct{})
	p.log.Info("devices changed", "devices", len(devs))
}

// parseDevices reads "ID" or "ID unhealthy" lines; blank lines and lines
// starting with # are skipped.
func parseDevices(raw []byte) []*pluginapi.Device {
	var devs []*pluginapi.Device
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") || seen[fields[0]] {
			continue
		}
		seen[fields[0]] = true
		health := pluginapi.Healthy
		if len(fields) > 1 && strings.EqualFold(fields[1], "unhealthy") {
			health = pluginapi.Unhealthy
		}
		devs = append(devs, &pluginapi.Device{ID: fields[0], Health: health})
	}
	return devs
}

func sameDevices(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Health != b[i].Health {
			return false
		}
	}
	return true
}

// GetDevicePluginOptions: no PreStartContainer, no preferred allocation.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list now and after every change.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		devs, changed := p.devs, p.changed
		p.mu.Unlock()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// Allocate hands the devices to a container: EXAMPLE_DEVICES lists them,
// and with --device-node each gets a device node.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	known := map[string]bool{}
	for _, d := range p.devs {
		known[d.ID] = true
	}
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		for _, id := range cr.GetDevicesIds() {
			if !known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "unknown device %q", id)
			}
		}
		out := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"EXAMPLE_DEVICES": strings.Join(cr.GetDevicesIds(), ",")},
		}
		if p.cfg.DeviceNode != "" {
			base := p.cfg.Resource[strings.LastIndex(p.cfg.Resource, "/")+1:]
			for _, id := range cr.GetDevicesIds() {
				out.Devices = append(out.Devices, &pluginapi.DeviceSpec{
					ContainerPath: "/dev/" + base + "-" + id,
					HostPath:      p.cfg.DeviceNode,
					Permissions:   "rw",
				})
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, out)
	}
	return resp, nil
}

// PreStartContainer is not required by this plugin.
func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
