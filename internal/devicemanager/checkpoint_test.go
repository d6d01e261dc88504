package devicemanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestCheckpointSurvivesRestart(t *testing.T) {
	dir := shortDir(t)
	env := startManager(t, dir, Config{}, nil)
	p := newTestPlugin(t, dir, "p.sock", testResource, "d0", "d1", "d2")
	p.allocResp = func(ids []string) *pluginapi.ContainerAllocateResponse {
		return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"EXAMPLE_DEVICES": strings.Join(ids, ",")}}
	}
	p.serve(t)
	p.register(t, dir)
	env.waitCounts(t, testResource, 3, 3)
	pod := podWith("uid1", ctr{"a", 2})
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	env.m.Stop()
	p.kill()

	// The next agent: the resource is known but empty until the plugin is back.
	env2 := startManager(t, dir, Config{}, nil)
	if c, a := env2.counts(testResource); c != 0 || a != 0 {
		t.Fatalf("before re-registration: capacity %d allocatable %d, want 0 and 0", c, a)
	}
	opts, err := env2.m.RunOptions(pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Envs) != 1 || string(opts.Envs[0].Value) != "d0,d1" {
		t.Fatalf("env restored from the checkpoint = %v, want EXAMPLE_DEVICES=d0,d1", opts.Envs)
	}

	p2 := newTestPlugin(t, dir, "p2.sock", testResource, "d0", "d1", "d2")
	p2.serve(t)
	p2.register(t, dir)
	env2.waitCounts(t, testResource, 3, 3)

	// Re-admitting the old pod does not call the plugin again; a new pod
	// cannot get the old pod's devices.
	if err := env2.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := env2.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 1})); err != nil {
		t.Fatal(err)
	}
	if got := held(env2.m, "uid2", "a"); !reflect.DeepEqual(got, []string{"d2"}) {
		t.Fatalf("new pod got %v, want [d2] (d0 and d1 are the old pod's)", got)
	}
	if calls := p2.allocCalls(); !reflect.DeepEqual(calls, [][]string{{"d2"}}) {
		t.Fatalf("plugin Allocate calls after restart = %v, want only [[d2]]", calls)
	}
}

func TestCheckpointGraceForPluginThatNeverReturns(t *testing.T) {
	dir := shortDir(t)
	env := startManager(t, dir, Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0")
	env.m.Stop()
	p.kill()

	env2 := startManager(t, dir, Config{}, nil)
	if c, _ := env2.counts(testResource); c != 0 {
		t.Fatalf("capacity %d, want 0 while waiting for the plugin", c)
	}
	env2.clock.Step(DefaultGracePeriod + 1)
	if _, _, removed := env2.m.Capacity(); !reflect.DeepEqual(removed, []string{testResource}) {
		t.Fatalf("removed = %v, want [%s]", removed, testResource)
	}
}

func TestCorruptCheckpointStartsEmpty(t *testing.T) {
	tests := map[string]func(t *testing.T, path string){
		"garbage": func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"checksum mismatch": func(t *testing.T, path string) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var f checkpointFile
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
			f.Checksum++
			out, _ := json.Marshal(f)
			if err := os.WriteFile(path, out, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, corrupt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := shortDir(t)
			env := startManager(t, dir, Config{}, nil)
			p := startPlugin(t, env, "p.sock", "d0")
			if err := env.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 1})); err != nil {
				t.Fatal(err)
			}
			env.m.Stop()
			p.kill()
			path := filepath.Join(dir, CheckpointName)
			corrupt(t, path)

			// An older corrupt copy is replaced, not added to.
			if err := os.WriteFile(path+CorruptSuffix, []byte("older"), 0o600); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			env2 := startManager(t, dir, Config{Recorder: rec, Node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}, nil)
			if held(env2.m, "uid1", "a") != nil {
				t.Fatal("allocations were restored from a corrupt checkpoint")
			}
			if c, _ := env2.counts(testResource); c != -1 {
				t.Fatalf("resource restored from a corrupt checkpoint")
			}
			aside, _ := filepath.Glob(path + ".corrupt*")
			if len(aside) != 1 || aside[0] != path+CorruptSuffix {
				t.Fatalf("corrupt checkpoint not moved aside as the one copy: %v", aside)
			}
			if kept, _ := os.ReadFile(aside[0]); string(kept) == "older" {
				t.Fatal("the older corrupt copy was kept instead of the newest")
			}
			if evs := rec.list(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning DeviceCheckpointCorrupt device checkpoint "+path+" was corrupt") {
				t.Fatalf("events = %q, want one DeviceCheckpointCorrupt warning", evs)
			}
			if w := env2.m.CheckpointWarning(); !strings.Contains(w, aside[0]) {
				t.Fatalf("CheckpointWarning() = %q, want it to name %s", w, aside[0])
			}
			if w := env.m.CheckpointWarning(); w != "" {
				t.Fatalf("a clean start warned: %q", w)
			}
		})
	}
}

func TestCheckpointWrittenOnEveryAllocationChange(t *testing.T) {
	dir := shortDir(t)
	env := startManager(t, dir, Config{}, nil)
	startPlugin(t, env, "p.sock", "d0", "d1")
	read := func() checkpointData {
		if err := env.m.ckpt.persisted(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		data, err := env.m.ckpt.read()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if got := read().RegisteredDevices[testResource]; !reflect.DeepEqual(got, []string{"d0", "d1"}) {
		t.Fatalf("registered devices in the checkpoint = %v", got)
	}
	if err := env.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 1})); err != nil {
		t.Fatal(err)
	}
	if e := read().PodDeviceEntries; len(e) != 1 || e[0].PodUID != "uid1" || !reflect.DeepEqual(e[0].DeviceIDs, []string{"d0"}) {
		t.Fatalf("entries after Allocate = %+v", e)
	}
	env.m.UpdateAllocatedDevices([]*v1.Pod{})
	if e := read().PodDeviceEntries; len(e) != 0 {
		t.Fatalf("entries after the pod went away = %+v", e)
	}
	// No temp files left behind by the atomic writes.
	if left, _ := filepath.Glob(filepath.Join(dir, ".checkpoint-*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// syncBuffer is a log sink the test can read while the manager writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestAllocateWaitsForPluginAfterRestart(t *testing.T) {
	dir := shortDir(t)
	env := startManager(t, dir, Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")
	env.m.Stop()
	p.kill()

	logs := &syncBuffer{}
	m, err := New(Config{PluginDir: dir, PluginWait: time.Minute}, nil, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)

	result := make(chan error, 1)
	go func() { result <- m.Allocate(context.Background(), podWith("uid1", ctr{"a", 2})) }()
	waitFor(t, "Allocate to wait for the plugin", func() bool {
		return strings.Contains(logs.String(), "waiting for a device plugin")
	})
	p2 := newTestPlugin(t, dir, "p2.sock", testResource, "d0", "d1")
	p2.serve(t)
	p2.register(t, dir)
	if err := <-result; err != nil {
		t.Fatalf("Allocate after the plugin came back: %v", err)
	}
	if got := held(m, "uid1", "a"); !reflect.DeepEqual(got, []string{"d0", "d1"}) {
		t.Fatalf("holds %v", got)
	}
}

// A checkpoint write that failed is tried again when a container is about
// to start, so a passing disk error does not refuse every container with
// devices until the next device change.
func TestFailedCheckpointWriteIsRetried(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, CheckpointName)
	// A non-empty directory where the file goes makes the rename fail.
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCheckpointer(path, discardLog())
	c.submit(checkpointData{RegisteredDevices: map[string][]string{testResource: {"d0"}}})
	if err := c.persisted(30 * time.Second); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("persisted with the path blocked = %v, want an Unavailable error", err)
	}

	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := c.persisted(30 * time.Second); err != nil {
		t.Fatalf("persisted after the disk recovered = %v, want the snapshot written", err)
	}
	got, err := c.read()
	if err != nil || !reflect.DeepEqual(got.RegisteredDevices, map[string][]string{testResource: {"d0"}}) {
		t.Fatalf("checkpoint after the retry: %+v, %v", got, err)
	}
}
