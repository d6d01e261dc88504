package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/devicemanager"
)

const res = "example.com/dev"

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startAgent runs a real device manager (the agent side) in dir.
func startAgent(t *testing.T, dir string) *devicemanager.Manager {
	t.Helper()
	m, err := devicemanager.New(devicemanager.Config{PluginDir: dir}, nil, clocktesting.NewFakeClock(time.Now()), discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func waitCounts(t *testing.T, m *devicemanager.Manager, capacity, allocatable int64) {
	t.Helper()
	waitFor(t, "device counts", func() bool {
		c, a, _ := m.Capacity()
		cq, a1 := c[res]
		aq, a2 := a[res]
		return a1 && a2 && cq.Value() == capacity && aq.Value() == allocatable
	})
}

func TestPluginAgainstDeviceManager(t *testing.T) {
	dir := shortDir(t)
	devFile := filepath.Join(t.TempDir(), "devices")
	if err := os.WriteFile(devFile, []byte("# example devices\nd0\nd1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m1 := startAgent(t, dir)

	p, err := newPlugin(Config{Resource: res, PluginDir: dir, DevicesFile: devFile, DeviceNode: "/dev/null"}, discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	stopPlugin := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("plugin: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stopPlugin()
		}
	})
	waitCounts(t, m1, 2, 2)

	// The health switch: edit the file.
	if err := os.WriteFile(devFile, []byte("d0\nd1 unhealthy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m1, 2, 1)

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid1"}}
	pod.Spec.Containers = []v1.Container{{Name: "c"}}
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{res: resource.MustParse("1")}
	if err := m1.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	opts, err := m1.RunOptions(pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Envs) != 1 || opts.Envs[0].Key != "EXAMPLE_DEVICES" || string(opts.Envs[0].Value) != "d0" {
		t.Fatalf("envs = %v, want EXAMPLE_DEVICES=d0", opts.Envs)
	}
	if len(opts.Devices) != 1 || opts.Devices[0].ContainerPath != "/dev/dev-d0" || opts.Devices[0].HostPath != "/dev/null" {
		t.Fatalf("devices = %v", opts.Devices)
	}

	// Agent restart: the new agent wipes the sockets, the plugin notices and registers again.
	m1.Stop()
	m2 := startAgent(t, dir)
	waitCounts(t, m2, 2, 1)

	// Plugin gone: devices turn unhealthy.
	stopPlugin()
	waitCounts(t, m2, 2, 0)
}

func TestParseDevices(t *testing.T) {
	got := parseDevices([]byte("a\n\n# comment\nb unhealthy\nc Unhealthy extra\na\n  d  \n"))
	want := []struct{ id, health string }{{"a", "Healthy"}, {"b", "Unhealthy"}, {"c", "Unhealthy"}, {"d", "Healthy"}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i, w := range want {
		if got[i].ID != w.id || got[i].Health != w.health {
			t.Errorf("device %d = %s %s, want %s %s", i, got[i].ID, got[i].Health, w.id, w.health)
		}
	}
}

func TestNewPluginValidatesFlags(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no resource":   {PluginDir: "/x", Devices: []string{"a"}},
		"not extended":  {Resource: "dev", PluginDir: "/x", Devices: []string{"a"}},
		"no plugin dir": {Resource: res, Devices: []string{"a"}},
		"no devices":    {Resource: res, PluginDir: "/x"},
	} {
		if _, err := newPlugin(cfg, discard()); err == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
}

// TestBinaryRegistersAndDies runs the real binary: it registers, and when
// the process is killed its devices turn unhealthy.
func TestBinaryRegistersAndDies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "example-device-plugin")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := shortDir(t)
	m := startAgent(t, dir)
	cmd := exec.Command(bin, "--resource", res, "--devices", "d0,d1,d2", "--plugin-dir", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("plugin stderr:\n%s", stderr.String())
		}
	})
	waitCounts(t, m, 3, 3)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	waitCounts(t, m, 3, 0)
}
