package devicemanager

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

const testResource = "example.com/dev"

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// shortDir is a fresh directory with a short path: unix socket paths must
// stay under 108 bytes, which t.TempDir does not guarantee.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type testEnv struct {
	dir   string
	clock *clocktesting.FakeClock
	m     *Manager
}

func startManager(t *testing.T, dir string, cfg Config, pods PodLister) *testEnv {
	t.Helper()
	cfg.PluginDir = dir
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := New(cfg, pods, clk, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return &testEnv{dir: dir, clock: clk, m: m}
}

// counts returns the capacity and allocatable count of a resource, -1 when absent.
func (e *testEnv) counts(name string) (capacity, allocatable int64) {
	c, a, _ := e.m.Capacity()
	capacity, allocatable = -1, -1
	if q, ok := c[v1.ResourceName(name)]; ok {
		capacity = q.Value()
	}
	if q, ok := a[v1.ResourceName(name)]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable
}

func (e *testEnv) waitCounts(t *testing.T, name string, capacity, allocatable int64) {
	t.Helper()
	waitFor(t, "capacity/allocatable of "+name, func() bool {
		c, a := e.counts(name)
		return c == capacity && a == allocatable
	})
}

// testPlugin is a device plugin served in-process over a real unix socket.
type testPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	socket   string // full path
	opts     *pluginapi.DevicePluginOptions
	srv      *grpc.Server

	mu          sync.Mutex
	devs        []*pluginapi.Device
	changed     chan struct{}
	allocs      [][]string
	preStarts   [][]string
	prefReqs    []*pluginapi.ContainerPreferredAllocationRequest
	preferred   func(available []string, size int) []string
	allocResp   func(ids []string) *pluginapi.ContainerAllocateResponse
	allocFailed bool
}

func newTestPlugin(t *testing.T, dir, socketName, resourceName string, ids ...string) *testPlugin {
	t.Helper()
	p := &testPlugin{
		resource: resourceName,
		socket:   filepath.Join(dir, socketName),
		opts:     &pluginapi.DevicePluginOptions{},
		changed:  make(chan struct{}),
	}
	for _, id := range ids {
		p.devs = append(p.devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	return p
}

// serve starts the plugin's gRPC server; it stops in t.Cleanup.
func (p *testPlugin) serve(t *testing.T) {
	t.Helper()
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		p.srv.Stop()
		<-done
	})
}

// kill stops serving: open streams end, as when the plugin process dies.
func (p *testPlugin) kill() { p.srv.Stop() }

func (p *testPlugin) register(t *testing.T, dir string) {
	t.Helper()
	if err := registerWith(dir, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: p.resource, Options: p.opts,
	}); err != nil {
		t.Fatalf("register %s: %v", p.resource, err)
	}
}

func registerWith(dir string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, KubeletSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true))
	return err
}

// setDevices replaces the advertised devices: id → healthy.
func (p *testPlugin) setDevices(devs ...*pluginapi.Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devs = devs
	close(p.changed)
	p.changed = make(chan struct{})
}

func dev(id string, healthy bool) *pluginapi.Device {
	h := pluginapi.Unhealthy
	if healthy {
		h = pluginapi.Healthy
	}
	return &pluginapi.Device{ID: id, Health: h}
}

func (p *testPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.opts, nil
}

func (p *testPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
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

func (p *testPlugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range req.ContainerRequests {
		p.prefReqs = append(p.prefReqs, r)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: p.preferred(r.AvailableDeviceIDs, int(r.AllocationSize)),
		})
	}
	return resp, nil
}

func (p *testPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.allocFailed {
		return nil, os.ErrPermission
	}
	resp := &pluginapi.AllocateResponse{}
	for _, r := range req.ContainerRequests {
		p.allocs = append(p.allocs, r.DevicesIds)
		cr := &pluginapi.ContainerAllocateResponse{}
		if p.allocResp != nil {
			cr = p.allocResp(r.DevicesIds)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (p *testPlugin) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preStarts = append(p.preStarts, req.DevicesIds)
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *testPlugin) allocCalls() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.allocs...)
}

// startPlugin serves and registers a plugin with healthy ids and waits
// until the manager sees them.
func startPlugin(t *testing.T, env *testEnv, socketName string, ids ...string) *testPlugin {
	t.Helper()
	p := newTestPlugin(t, env.dir, socketName, testResource, ids...)
	p.serve(t)
	p.register(t, env.dir)
	env.waitCounts(t, testResource, int64(len(ids)), int64(len(ids)))
	return p
}

// podWith builds a pod whose containers ask for n devices each; a name
// starting with "init-" makes an init container.
type ctr struct {
	name string
	n    int64
}

func podWith(uid string, cs ...ctr) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)}}
	for _, c := range cs {
		spec := v1.Container{Name: c.name}
		if c.n > 0 {
			spec.Resources.Limits = v1.ResourceList{testResource: *resource.NewQuantity(c.n, resource.DecimalSI)}
		}
		if len(c.name) > 5 && c.name[:5] == "init-" {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, spec)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, spec)
		}
	}
	return pod
}

// held returns the device IDs a container holds of testResource.
func held(m *Manager, uid, container string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.podDevs.get(types.UID(uid), container, testResource); a != nil {
		return sets.List(a.ids)
	}
	return nil
}
