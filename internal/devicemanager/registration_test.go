package devicemanager

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestRegisterRejectsBadRequests(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	tests := []struct {
		name     string
		req      *pluginapi.RegisterRequest
		wantText string
	}{
		{"old version", &pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "a.sock", ResourceName: testResource}, `version "v1alpha" is not supported`},
		{"native resource", &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "cpu"}, `resourceName "cpu" is not an extended resource name`},
		{"kubernetes.io domain", &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "kubernetes.io/dev"}, "not an extended resource name"},
		{"bad qualified name", &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "example.com/-bad-"}, "not an extended resource name"},
		{"endpoint escapes dir", &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "../a.sock", ResourceName: testResource}, `endpoint "../a.sock" must be a socket file name`},
		{"empty endpoint", &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: testResource}, `endpoint ""`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := registerWith(env.dir, tc.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Register = %v, want InvalidArgument", err)
			}
			if !strings.Contains(status.Convert(err).Message(), tc.wantText) {
				t.Fatalf("message %q does not mention %q", status.Convert(err).Message(), tc.wantText)
			}
		})
	}
	if c, _, _ := env.m.Capacity(); len(c) != 0 {
		t.Fatalf("rejected registrations left resources: %v", c)
	}
}

func TestStartPreparesPluginDir(t *testing.T) {
	parent := shortDir(t)
	dir := filepath.Join(parent, "plugins")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A stale plugin socket from a previous run and an unrelated file.
	stale := filepath.Join(dir, "old-plugin.sock")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	lis.Close()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	startManager(t, dir, Config{}, nil)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale socket still there: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("regular file was removed: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, KubeletSocket)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("kubelet.sock missing or not a socket: %v", err)
	}

	fresh := filepath.Join(parent, "new", "plugins")
	startManager(t, fresh, Config{}, nil)
	fi, err := os.Stat(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Fatalf("created plugin dir mode %v, want 0750", fi.Mode().Perm())
	}
}

func TestListAndWatchUpdatesCapacity(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := newTestPlugin(t, env.dir, "p.sock", testResource) // starts with no devices, like some real plugins
	p.serve(t)
	p.register(t, env.dir)
	env.waitCounts(t, testResource, 0, 0)

	p.setDevices(dev("d0", true), dev("d1", true), dev("d2", true))
	env.waitCounts(t, testResource, 3, 3)

	p.setDevices(dev("d0", true), dev("d1", false), dev("d2", true))
	env.waitCounts(t, testResource, 3, 2)

	p.setDevices(dev("d0", true))
	env.waitCounts(t, testResource, 1, 1)
}

func TestPluginDeathAndGracePeriod(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")

	p.kill()
	env.waitCounts(t, testResource, 2, 0) // still listed, all unhealthy

	env.clock.Step(DefaultGracePeriod)
	if q, ok := env.m.Allocatable()[testResource]; !ok || q.Value() != 0 {
		t.Fatalf("Allocatable() = %v, want %s: 0 within the grace period", env.m.Allocatable(), testResource)
	}
	if c, a := env.counts(testResource); c != 2 || a != 0 {
		t.Fatalf("at exactly the grace period: capacity %d allocatable %d, want 2 and 0", c, a)
	}
	env.clock.Step(time.Second)
	if _, ok := env.m.Allocatable()[testResource]; ok {
		t.Fatalf("Allocatable() still lists %s after the grace period", testResource)
	}
	_, _, removed := env.m.Capacity()
	if len(removed) != 1 || removed[0] != testResource {
		t.Fatalf("removed = %v, want [%s]", removed, testResource)
	}
	if c, _ := env.counts(testResource); c != -1 {
		t.Fatalf("resource still in capacity after the grace period")
	}
}

func TestPluginComingBackWithinGracePeriod(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")
	p.kill()
	env.waitCounts(t, testResource, 2, 0)
	env.clock.Step(4 * time.Minute)

	startPlugin(t, env, "p2.sock", "d0", "d1")
	env.clock.Step(10 * time.Minute)
	if c, a := env.counts(testResource); c != 2 || a != 2 {
		t.Fatalf("capacity %d allocatable %d after the plugin came back, want 2 and 2", c, a)
	}
}

func TestReRegistrationReplacesEndpoint(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	first := startPlugin(t, env, "first.sock", "a0", "a1")

	second := newTestPlugin(t, env.dir, "second.sock", testResource, "b0")
	second.serve(t)
	second.register(t, env.dir)
	env.waitCounts(t, testResource, 1, 1)

	// The replaced plugin dying must not mark the new plugin's devices unhealthy.
	first.kill()
	first.setDevices(dev("a0", true))
	second.setDevices(dev("b0", true), dev("b1", true))
	env.waitCounts(t, testResource, 2, 2)
	got := env.m.Devices()
	if len(got) != 2 || got[0].ID != "b0" || got[1].ID != "b1" || !got[0].Healthy {
		t.Fatalf("devices = %+v, want healthy b0 and b1", got)
	}

	// The same plugin registering twice is fine too.
	second.register(t, env.dir)
	env.waitCounts(t, testResource, 2, 2)
}

func TestKubeletSocketRecreatedAfterDeletion(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	sock := filepath.Join(env.dir, KubeletSocket)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "kubelet.sock to be re-created", func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	// Registration works on the new socket.
	startPlugin(t, env, "p.sock", "d0")
}

func TestStopRemovesKubeletSocket(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	startPlugin(t, env, "p.sock", "d0")
	env.m.Stop()
	env.m.Stop() // idempotent
	if _, err := os.Stat(filepath.Join(env.dir, KubeletSocket)); !os.IsNotExist(err) {
		t.Fatalf("kubelet.sock still present after Stop: %v", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"relative dir":      {PluginDir: "plugins"},
		"negative grace":    {PluginDir: "/x", GracePeriod: -time.Second},
		"pod-res no lister": {PluginDir: "/x", PodResourcesSocket: "/x/pr.sock"},
		"negative timeout":  {PluginDir: "/x", RPCTimeout: -time.Second},
		"negative wait":     {PluginDir: "/x", PluginWait: -time.Second},
	} {
		if _, err := New(cfg, nil, nil, discardLog()); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: New(%+v) = %v, want an InvalidArgument error", name, cfg, err)
		}
	}
}
