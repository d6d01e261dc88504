package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/minilet/minilet/internal/errdefs"
)

// supportedVersions are the device plugin API versions Register accepts.
var supportedVersions = []string{pluginapi.Version}

// regServer serves the Registration service on kubelet.sock and puts the
// socket back when someone deletes it (plugins watch it and re-register
// when it reappears).
type regServer struct {
	pluginapi.UnimplementedRegistrationServer
	m    *Manager
	path string
	log  *slog.Logger
	srv  *grpc.Server

	mu  sync.Mutex
	lis *net.UnixListener

	watcher *fsnotify.Watcher
	wg      sync.WaitGroup
	once    sync.Once
}

func startRegServer(ctx context.Context, m *Manager, path string) (*regServer, error) {
	r := &regServer{m: m, path: path, log: m.log, srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(r.srv, r)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("device manager: watch %s: %w", filepath.Dir(path), err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("device manager: watch %s: %w", filepath.Dir(path), err)
	}
	r.watcher = w
	if err := r.listen(); err != nil {
		_ = w.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.watch(ctx)
	return r, nil
}

// listen (re)creates kubelet.sock and serves on it; an older listener is
// closed without unlinking the new file.
func (r *regServer) listen() error {
	if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("device manager: remove old %s: %w", r.path, err)
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: r.path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("device manager: listen on %s: %w", r.path, err)
	}
	lis.SetUnlinkOnClose(false)
	r.mu.Lock()
	old := r.lis
	r.lis = lis
	r.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// Serve returns when this listener is closed (replaced or stopped).
		if err := r.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			r.log.Debug("registration listener closed", "err", err)
		}
	}()
	return nil
}

// watch re-creates kubelet.sock whenever it is deleted or renamed away.
func (r *regServer) watch(ctx context.Context) {
	defer r.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-r.watcher.Errors:
			if !ok {
				return
			}
			r.log.Warn("watching the plugin directory failed", "err", err)
		case ev, ok := <-r.watcher.Events:
			if !ok {
				return
			}
			if ev.Name != r.path || !ev.Has(fsnotify.Remove|fsnotify.Rename) {
				continue
			}
			if _, err := os.Stat(r.path); err == nil || ctx.Err() != nil {
				continue
			}
			r.log.Info("kubelet.sock was removed; re-creating it", "path", r.path)
			if err := r.listen(); err != nil {
				r.log.Error("re-creating kubelet.sock failed", "err", err)
			}
		}
	}
}

// stop ends the watcher and the server and removes kubelet.sock.
// Idempotent; the caller has cancelled the watcher's context.
func (r *regServer) stop() {
	r.once.Do(func() {
		_ = r.watcher.Close()
		r.srv.Stop()
		r.wg.Wait()
		_ = os.Remove(r.path)
	})
}

// Register is the plugin's call on kubelet.sock. It validates the request
// and connects to the plugin in the background.
func (r *regServer) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if err := r.m.register(req); err != nil {
		r.log.Warn("device plugin registration rejected", "resource", req.GetResourceName(), "err", err)
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pluginapi.Empty{}, nil
}

// register validates req, replaces any endpoint of the same resource and
// starts streaming from the new one.
func (m *Manager) register(req *pluginapi.RegisterRequest) error {
	if err := validateRegistration(req); err != nil {
		return err
	}
	socket := filepath.Join(m.cfg.PluginDir, req.GetEndpoint())
	e, err := dialEndpoint(req.GetResourceName(), socket, req.GetOptions())
	if err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	ctx, cancel := context.WithCancel(m.runCtx)
	e.cancel = cancel

	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		cancel()
		_ = e.conn.Close()
		return fmt.Errorf("device manager is stopping: %w", errdefs.ErrUnavailable)
	}
	old := m.endpoints[req.GetResourceName()]
	m.endpoints[req.GetResourceName()] = e
	if _, ok := m.devices[e.resource]; !ok {
		m.devices[e.resource] = map[string]*device{}
	}
	m.wg.Add(1)
	m.mu.Unlock()

	m.log.Info("device plugin registered", "resource", e.resource, "socket", socket,
		"preStartRequired", req.GetOptions().GetPreStartRequired(),
		"preferredAllocation", req.GetOptions().GetGetPreferredAllocationAvailable())
	go m.runEndpoint(ctx, e)
	if old != nil {
		// The old stream's end is ignored: it is no longer the current endpoint.
		old.stop()
	}
	return nil
}

// validateRegistration checks the version, the resource name and the
// endpoint, naming the bad field.
func validateRegistration(req *pluginapi.RegisterRequest) error {
	if req == nil {
		return fmt.Errorf("empty registration request: %w", errdefs.ErrInvalidArgument)
	}
	supported := false
	for _, v := range supportedVersions {
		if req.GetVersion() == v {
			supported = true
		}
	}
	if !supported {
		return fmt.Errorf("registration of %q: version %q is not supported, supported versions: %s: %w",
			req.GetResourceName(), req.GetVersion(), strings.Join(supportedVersions, ", "), errdefs.ErrInvalidArgument)
	}
	if !isExtendedResourceName(req.GetResourceName()) {
		return fmt.Errorf("registration: resourceName %q is not an extended resource name (want domain/name outside kubernetes.io, e.g. example.com/dev): %w",
			req.GetResourceName(), errdefs.ErrInvalidArgument)
	}
	ep := req.GetEndpoint()
	if ep == "" || ep != filepath.Base(ep) || ep == "." || ep == ".." || ep == KubeletSocket {
		return fmt.Errorf("registration of %q: endpoint %q must be a socket file name inside the plugin directory: %w",
			req.GetResourceName(), ep, errdefs.ErrInvalidArgument)
	}
	return nil
}

// isExtendedResourceName follows the API's rule: a qualified name with a
// domain outside kubernetes.io that is not a requests.* quota name.
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") {
		return false // native
	}
	if strings.HasPrefix(name, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+name)) == 0
}
