package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/minilet/minilet/internal/errdefs"
)

// fakeRunning is the runtime's view of which pods still run containers.
type fakeRunning struct {
	mu    sync.Mutex
	pods  sets.Set[types.UID]
	calls int
}

func (f *fakeRunning) set(uids ...types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = sets.New(uids...)
}

func (f *fakeRunning) RunningPods(context.Context) (sets.Set[types.UID], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.pods.Clone(), nil
}

// recorder keeps the events it is given as "type reason message".
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Event(_ runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, eventtype+" "+reason+" "+message)
}

func (r *recorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// A pod restored from the checkpoint is re-admitted without its plugin,
// and when it is rejected or leaves while its containers still run, its
// devices are not handed to another pod until they have stopped.
func TestRestoredPodKeepsDevicesUntilItsContainersStop(t *testing.T) {
	dir := shortDir(t)
	env := startManager(t, dir, Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")
	if err := env.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 2})); err != nil {
		t.Fatal(err)
	}
	env.m.Stop()

	running := &fakeRunning{}
	running.set("uid1")
	env2 := startManager(t, dir, Config{Running: running}, nil)
	// Before the plugin registers again: the running pod is admitted.
	if ok, reason, msg := env2.m.Admit(context.Background(), podWith("uid1", ctr{"a", 2}), nil); !ok {
		t.Fatalf("restored pod rejected before its plugin came back: %s %s", reason, msg)
	}
	if got := env2.m.InUse()[testResource]; got.Value() != 2 {
		t.Fatalf("InUse = %s, want the 2 restored devices", got.String())
	}
	// The plugin notices its socket is gone and registers again.
	p.kill()
	p2 := newTestPlugin(t, dir, "p2.sock", testResource, "d0", "d1")
	p2.serve(t)
	p2.register(t, dir)
	env2.waitCounts(t, testResource, 2, 2)
	if n := len(p2.allocCalls()); n != 0 {
		t.Fatalf("plugin Allocate called %d times after the restart, want none for a restored pod", n)
	}

	// Rejected by a later admitter while its containers still run.
	env2.m.Release("uid1")
	if got := held(env2.m, "uid1", "a"); !reflect.DeepEqual(got, []string{"d0", "d1"}) {
		t.Fatalf("after Release with containers running, uid1 holds %v; want d0 d1 until they stop", got)
	}
	if got := env2.m.Releasing(); !reflect.DeepEqual(got, []types.UID{"uid1"}) {
		t.Fatalf("Releasing = %v", got)
	}
	err := env2.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 1}))
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("a new pod got a device still in use: err = %v", err)
	}
	env2.m.UpdateAllocatedDevices(nil)
	if got := held(env2.m, "uid1", "a"); len(got) != 2 {
		t.Fatalf("housekeeping freed devices of running containers: holds %v", got)
	}

	// Its containers stopped: the next housekeeping frees them.
	running.set()
	env2.m.UpdateAllocatedDevices(nil)
	if got := held(env2.m, "uid1", "a"); got != nil {
		t.Fatalf("after the containers stopped uid1 still holds %v", got)
	}
	if len(env2.m.Releasing()) != 0 {
		t.Fatalf("Releasing = %v after the free", env2.m.Releasing())
	}
	if err := env2.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 1})); err != nil {
		t.Fatalf("device still held after its pod stopped: %v", err)
	}
}

// A pod admitted now and rejected by a later admitter never started a
// container: its devices are freed at once, without asking the runtime.
func TestRejectedNewPodFreesDevicesAtOnce(t *testing.T) {
	running := &fakeRunning{}
	env := startManager(t, shortDir(t), Config{Running: running}, nil)
	startPlugin(t, env, "p.sock", "d0")
	pod := podWith("uid1", ctr{"a", 1})
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	env.m.Release("uid1")
	if got := held(env.m, "uid1", "a"); got != nil {
		t.Fatalf("rejected pod still holds %v", got)
	}
	if running.calls != 0 {
		t.Fatalf("runtime asked %d times for a pod that never started", running.calls)
	}

	// Once a container started, leaving waits for the runtime.
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if _, err := env.m.RunOptions(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	running.set("uid1")
	env.m.Release("uid1")
	if got := held(env.m, "uid1", "a"); got == nil {
		t.Fatal("a started pod's devices were freed while its container runs")
	}
	running.set()
	env.m.Release("uid1")
	if got := held(env.m, "uid1", "a"); got != nil {
		t.Fatalf("after its container stopped the pod still holds %v", got)
	}
}

// A new pod asking for a resource whose plugin has not registered again
// waits with an event; once the plugin has been gone for PluginWait, pods
// fail at once instead of each waiting again.
func TestPluginWaitIsBoundedAndRecorded(t *testing.T) {
	dir := shortDir(t)
	env := startManager(t, dir, Config{}, nil)
	startPlugin(t, env, "p.sock", "d0")
	env.m.Stop()

	rec := &recorder{}
	env2 := startManager(t, dir, Config{PluginWait: 200 * time.Millisecond, Recorder: rec}, nil)
	err := env2.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 1}))
	if err == nil || err.Error() != "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/dev, which is unexpected" {
		t.Fatalf("Allocate without the plugin = %v", err)
	}
	want := []string{"Normal WaitingForDevicePlugin Waiting up to 200ms for the device plugin of example.com/dev to register"}
	if got := rec.list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	// The plugin has now been gone longer than PluginWait: no more waiting.
	env2.clock.Step(time.Second)
	if err := env2.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 1})); err == nil {
		t.Fatal("Allocate without the plugin succeeded")
	}
	if len(rec.list()) != 1 {
		t.Fatalf("a second wait was recorded: %q", rec.list())
	}
}
