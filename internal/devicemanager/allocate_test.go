package devicemanager

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestAllocateOrderAndReuse(t *testing.T) {
	type want map[string][]string // container → devices
	tests := []struct {
		name    string
		devices []string
		pod     []ctr
		want    want
	}{
		{
			name:    "app containers get free devices in ID order",
			devices: []string{"d0", "d1", "d2", "d3"},
			pod:     []ctr{{"a", 1}, {"b", 2}},
			want:    want{"a": {"d0"}, "b": {"d1", "d2"}},
		},
		{
			name:    "init devices are reused by app containers, then freed for others",
			devices: []string{"d0", "d1", "d2", "d3"},
			pod:     []ctr{{"init-a", 2}, {"b", 1}, {"c", 2}},
			want:    want{"init-a": {"d0", "d1"}, "b": {"d0"}, "c": {"d1", "d2"}},
		},
		{
			name:    "later init containers reuse earlier init devices",
			devices: []string{"d0", "d1", "d2"},
			pod:     []ctr{{"init-a", 1}, {"init-b", 2}, {"c", 3}},
			want:    want{"init-a": {"d0"}, "init-b": {"d0", "d1"}, "c": {"d0", "d1", "d2"}},
		},
		{
			name:    "containers without device requests get nothing",
			devices: []string{"d0"},
			pod:     []ctr{{"a", 0}, {"b", 1}},
			want:    want{"b": {"d0"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := startManager(t, shortDir(t), Config{}, nil)
			p := startPlugin(t, env, "p.sock", tc.devices...)
			pod := podWith("uid1", tc.pod...)
			if err := env.m.Allocate(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.pod {
				if got := held(env.m, "uid1", c.name); !reflect.DeepEqual(got, tc.want[c.name]) {
					t.Errorf("container %s holds %v, want %v", c.name, got, tc.want[c.name])
				}
			}
			if got := len(p.allocCalls()); got != len(tc.want) {
				t.Errorf("plugin Allocate called %d times, want once per container with devices (%d)", got, len(tc.want))
			}
		})
	}
}

func TestAllocateIsIdempotentForAdmittedPods(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1", "d2")
	pod := podWith("uid1", ctr{"a", 2})
	for range 2 {
		if err := env.m.Allocate(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.allocCalls()); n != 1 {
		t.Fatalf("plugin Allocate called %d times for one admitted pod, want 1", n)
	}
	if got := held(env.m, "uid1", "a"); !reflect.DeepEqual(got, []string{"d0", "d1"}) {
		t.Fatalf("holds %v", got)
	}
	// A second pod gets what is left; a third finds nothing.
	if err := env.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 1})); err != nil {
		t.Fatal(err)
	}
	if got := held(env.m, "uid2", "a"); !reflect.DeepEqual(got, []string{"d2"}) {
		t.Fatalf("second pod holds %v, want [d2]", got)
	}
}

func TestAllocateFailures(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")
	p.setDevices(dev("d0", true), dev("d1", false))
	env.waitCounts(t, testResource, 2, 1)

	// Too few healthy devices: the kubelet's words, classified.
	err := env.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 2}))
	const msg = "Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1, which is unexpected"
	if err == nil || err.Error() != msg {
		t.Fatalf("error = %v, want %q", err, msg)
	}
	var ae *AdmissionError
	if !errors.As(err, &ae) || ae.Reason() != ReasonUnexpectedAdmissionError || ae.Container != "a" || ae.Resource != testResource {
		t.Fatalf("error %#v is not an AdmissionError for container a", err)
	}
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("error %v is not ErrResourceExhausted", err)
	}

	// A pod whose second container fails keeps nothing from the first.
	err = env.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 1}, ctr{"b", 1}))
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("error = %v, want ErrResourceExhausted", err)
	}
	if got := held(env.m, "uid2", "a"); got != nil {
		t.Fatalf("failed pod still holds %v", got)
	}
	if err := env.m.Allocate(context.Background(), podWith("uid3", ctr{"a", 1})); err != nil {
		t.Fatalf("device of the failed pod was not freed: %v", err)
	}

	// A resource no plugin ever registered.
	pod := podWith("uid4", ctr{"a", 0})
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{"vendor.io/gpu": resource.MustParse("1")}
	err = env.m.Allocate(context.Background(), pod)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !errors.As(err, &ae) || ae.Reason() != "OutOfvendor.io/gpu" ||
		err.Error() != "Node didn't have enough resource: vendor.io/gpu, requested: 1, used: 0, capacity: 0" {
		t.Fatalf("error = %v, want OutOfvendor.io/gpu as the kubelet's resource fit says it", err)
	}

	// The plugin's Allocate failing.
	p.setDevices(dev("d0", true), dev("d1", true))
	env.waitCounts(t, testResource, 2, 2)
	p.mu.Lock()
	p.allocFailed = true
	p.mu.Unlock()
	err = env.m.Allocate(context.Background(), podWith("uid5", ctr{"a", 1}))
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	if got := held(env.m, "uid5", "a"); got != nil {
		t.Fatalf("pod holds %v after the plugin failed", got)
	}

	// The plugin gone.
	p.kill()
	env.waitCounts(t, testResource, 2, 0)
	err = env.m.Allocate(context.Background(), podWith("uid6", ctr{"a", 1}))
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "no healthy devices present; cannot allocate unhealthy devices example.com/dev") {
		t.Fatalf("error = %v, want plugin not running", err)
	}
}

func TestPreferredAllocation(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := newTestPlugin(t, env.dir, "p.sock", testResource, "d0", "d1", "d2", "d3")
	p.opts = &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
	p.preferred = func(available []string, size int) []string {
		return available[len(available)-size:] // the highest IDs
	}
	p.serve(t)
	p.register(t, env.dir)
	env.waitCounts(t, testResource, 4, 4)

	if err := env.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 2})); err != nil {
		t.Fatal(err)
	}
	if got := held(env.m, "uid1", "a"); !reflect.DeepEqual(got, []string{"d2", "d3"}) {
		t.Fatalf("holds %v, want the preferred [d2 d3]", got)
	}
	p.mu.Lock()
	req := p.prefReqs[0]
	p.mu.Unlock()
	if !reflect.DeepEqual(req.AvailableDeviceIDs, []string{"d0", "d1", "d2", "d3"}) || req.AllocationSize != 2 {
		t.Fatalf("preferred request = %v", req)
	}

	// Exactly as many free as needed: nothing to choose, the plugin is not asked.
	if err := env.m.Allocate(context.Background(), podWith("uid2", ctr{"a", 2})); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	n := len(p.prefReqs)
	p.mu.Unlock()
	if n != 1 {
		t.Fatalf("GetPreferredAllocation called %d times, want 1", n)
	}
}

func TestPreStartContainer(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := newTestPlugin(t, env.dir, "p.sock", testResource, "d0", "d1")
	p.opts = &pluginapi.DevicePluginOptions{PreStartRequired: true}
	p.serve(t)
	p.register(t, env.dir)
	env.waitCounts(t, testResource, 2, 2)

	pod := podWith("uid1", ctr{"a", 2}, ctr{"b", 0})
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := env.m.PreStart(context.Background(), pod, "a"); err != nil {
		t.Fatal(err)
	}
	if err := env.m.PreStart(context.Background(), pod, "b"); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	calls := p.preStarts
	p.mu.Unlock()
	if !reflect.DeepEqual(calls, [][]string{{"d0", "d1"}}) {
		t.Fatalf("PreStartContainer calls = %v, want one with [d0 d1]", calls)
	}

	// RunOptions, which runs right before the container is created,
	// calls it as the kubelet does.
	if _, err := env.m.RunOptions(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	n := len(p.preStarts)
	p.mu.Unlock()
	if n != 2 {
		t.Fatalf("RunOptions made %d PreStartContainer calls in all, want 2", n)
	}
	// A failing PreStartContainer fails the container's options.
	p.kill()
	env.waitCounts(t, testResource, 2, 0)
	if _, err := env.m.RunOptions(pod, &pod.Spec.Containers[0]); err == nil {
		t.Fatal("RunOptions succeeded with the PreStartRequired plugin gone")
	}
}

func TestRunOptionsFromAllocateResponses(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := newTestPlugin(t, env.dir, "p.sock", testResource, "d0", "d1")
	p.allocResp = func(ids []string) *pluginapi.ContainerAllocateResponse {
		return &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"EXAMPLE_DEVICES": strings.Join(ids, ",")},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/opt/dev", HostPath: "/var/dev", ReadOnly: true}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/ex0", HostPath: "/dev/null", Permissions: "rw"}},
			Annotations: map[string]string{"example.com/note": "yes"},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/dev=d0"}},
		}
	}
	p.serve(t)
	p.register(t, env.dir)
	env.waitCounts(t, testResource, 2, 2)

	pod := podWith("uid1", ctr{"a", 2}, ctr{"plain", 0}, ctr{"notadmitted", 1})
	pod.Spec.Containers = pod.Spec.Containers[:2]
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	opts, err := env.m.RunOptions(pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := []*runtimeapi.KeyValue{{Key: "EXAMPLE_DEVICES", Value: []byte("d0,d1")}}
	if len(opts.Envs) != 1 || opts.Envs[0].Key != wantEnv[0].Key || string(opts.Envs[0].Value) != "d0,d1" {
		t.Fatalf("envs = %v", opts.Envs)
	}
	if len(opts.Mounts) != 1 || opts.Mounts[0].ContainerPath != "/opt/dev" || opts.Mounts[0].HostPath != "/var/dev" || !opts.Mounts[0].Readonly {
		t.Fatalf("mounts = %v", opts.Mounts)
	}
	if len(opts.Devices) != 1 || opts.Devices[0].ContainerPath != "/dev/ex0" || opts.Devices[0].Permissions != "rw" {
		t.Fatalf("devices = %v", opts.Devices)
	}
	if opts.Annotations["example.com/note"] != "yes" || len(opts.Annotations) != 1 {
		t.Fatalf("annotations = %v, want only the plugin's", opts.Annotations)
	}
	if len(opts.CDIDevices) != 1 || opts.CDIDevices[0].GetName() != "example.com/dev=d0" {
		t.Fatalf("CDI devices = %v, want example.com/dev=d0 in CRI's CDIDevices field", opts.CDIDevices)
	}

	plain, err := env.m.RunOptions(pod, &pod.Spec.Containers[1])
	if err != nil || len(plain.Envs)+len(plain.Mounts)+len(plain.Devices)+len(plain.CDIDevices)+len(plain.Annotations) != 0 {
		t.Fatalf("container without devices: %v, %v", plain, err)
	}
	notAdmitted := podWith("uid2", ctr{"x", 1})
	if _, err := env.m.RunOptions(notAdmitted, &notAdmitted.Spec.Containers[0]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("RunOptions for a container holding nothing = %v, want ErrNotFound", err)
	}
}

func TestRemovePodAndUpdateAllocatedDevices(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	startPlugin(t, env, "p.sock", "d0", "d1")
	pod1, pod2 := podWith("uid1", ctr{"a", 1}), podWith("uid2", ctr{"a", 1})
	for _, p := range []*v1.Pod{pod1, pod2} {
		if err := env.m.Allocate(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	full := podWith("uid3", ctr{"a", 1})
	if err := env.m.Allocate(context.Background(), full); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("allocating a third device = %v, want ErrResourceExhausted", err)
	}
	env.m.RemovePod("uid1")
	if err := env.m.Allocate(context.Background(), full); err != nil {
		t.Fatalf("device of the removed pod was not freed: %v", err)
	}
	env.m.UpdateAllocatedDevices([]*v1.Pod{full})
	if held(env.m, "uid2", "a") != nil {
		t.Fatal("inactive pod still holds its device")
	}
	if err := env.m.Allocate(context.Background(), podWith("uid4", ctr{"a", 1})); err != nil {
		t.Fatalf("device of the inactive pod was not freed: %v", err)
	}
}

func TestContainerHealthAndDevices(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")
	if err := env.m.Allocate(context.Background(), podWith("uid1", ctr{"a", 1})); err != nil {
		t.Fatal(err)
	}
	health := func() v1.ResourceHealthStatus {
		st := env.m.ContainerHealth("uid1", "a")
		if len(st) != 1 || len(st[0].Resources) != 1 || st[0].Resources[0].ResourceID != "d0" {
			t.Fatalf("health = %+v", st)
		}
		return st[0].Resources[0].Health
	}
	if h := health(); h != v1.ResourceHealthStatusHealthy {
		t.Fatalf("health %s, want Healthy", h)
	}
	p.setDevices(dev("d0", false), dev("d1", true))
	waitFor(t, "d0 unhealthy", func() bool { return health() == v1.ResourceHealthStatusUnhealthy })

	devs := env.m.Devices()
	want := []DeviceInfo{
		{Resource: testResource, ID: "d0", Healthy: false, PodUID: "uid1", Container: "a"},
		{Resource: testResource, ID: "d1", Healthy: true},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("Devices() = %+v, want %+v", devs, want)
	}
}

func TestSidecarDevicesAreNotReused(t *testing.T) {
	env := startManager(t, shortDir(t), Config{}, nil)
	startPlugin(t, env, "p.sock", "d0", "d1", "d2")
	pod := podWith("uid1", ctr{"init-a", 1}, ctr{"init-sidecar", 1}, ctr{"c", 1})
	always := v1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers[1].RestartPolicy = &always
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	// The sidecar may take the finished init container's device, but it
	// keeps running, so the app container needs another one.
	want := map[string][]string{"init-a": {"d0"}, "init-sidecar": {"d0"}, "c": {"d1"}}
	for c, ids := range want {
		if got := held(env.m, "uid1", c); !reflect.DeepEqual(got, ids) {
			t.Errorf("%s holds %v, want %v", c, got, ids)
		}
	}
}
