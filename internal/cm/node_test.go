package cm

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestAllocatable(t *testing.T) {
	m := newTestManager(t, Config{
		CapacityOverride: rl("cpu", "2", "memory", "8Gi", "ephemeral-storage", "100Gi"),
		KubeReserved:     rl("cpu", "100m", "memory", "1Gi"),
		SystemReserved:   rl("cpu", "200m", "memory", "500Mi", "ephemeral-storage", "10Gi"),
		EvictionHard:     map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"},
		Extended:         extended{"example.com/gpu": "2"},
	})
	alloc := m.Allocatable()
	for name, want := range map[v1.ResourceName]string{
		"cpu": "1700m", "memory": "6568Mi", "ephemeral-storage": "80Gi", "pods": "110", "example.com/gpu": "2",
	} {
		q := alloc[name]
		if w := rl(string(name), want)[name]; q.Cmp(w) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, q.String(), want)
		}
	}
	capacity := m.Capacity()
	if q := capacity[v1.ResourceMemory]; q.String() != "8Gi" {
		t.Errorf("capacity memory = %s, want 8Gi", q.String())
	}
	if _, ok := capacity["example.com/gpu"]; !ok {
		t.Error("capacity lacks the extended resource")
	}
}

func TestMachineCapacity(t *testing.T) {
	c, err := machineCapacity(t.TempDir(), 110)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []v1.ResourceName{"cpu", "memory", "pods", "ephemeral-storage"} {
		if q := c[name]; q.Sign() <= 0 {
			t.Errorf("capacity %s = %s, want > 0", name, q.String())
		}
	}
}

func TestReservationsAboveCapacityFloorAtZero(t *testing.T) {
	m := newTestManager(t, Config{CapacityOverride: rl("cpu", "1", "memory", "1Gi", "ephemeral-storage", "1Gi"),
		KubeReserved: rl("cpu", "2", "memory", "2Gi")})
	alloc := m.Allocatable()
	for _, name := range []v1.ResourceName{"cpu", "memory"} {
		if q := alloc[name]; !q.IsZero() {
			t.Errorf("allocatable %s = %s, want 0", name, q.String())
		}
	}
}

func TestConfigBadInput(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		wantField string
	}{
		{"negative kube-reserved", Config{KubeReserved: rl("cpu", "-1")}, "kubeReserved[cpu]"},
		{"bad eviction quantity", Config{EvictionHard: map[string]string{"memory.available": "lots"}}, "evictionHard[memory.available]"},
		{"bad eviction percent", Config{EvictionHard: map[string]string{"nodefs.available": "120%"}}, "evictionHard[nodefs.available]"},
		{"qos reserved above 100", Config{QOSReservedMemoryPercent: 150}, "qosReserved[memory]"},
		{"cgroup root with ..", Config{CgroupRoot: "/a/../b"}, "--cgroup-root"},
		{"bad enforce value", Config{EnforceNodeAllocatable: []string{"everything"}}, "enforceNodeAllocatable"},
		{"bad cgroup driver", Config{CgroupDriver: "openrc"}, "openrc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = discard()
			tc.cfg.RootDir = t.TempDir()
			_, err := New(tc.cfg)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("New: err = %v, want invalid argument naming %s", err, tc.wantField)
			}
		})
	}
}

// extended is an ExtendedResources hook with fixed values, all healthy
// and none in use.
type extended map[string]string

func (e extended) Resources() (capacity, allocatable v1.ResourceList) {
	out := v1.ResourceList{}
	for k, v := range e {
		out[v1.ResourceName(k)] = rl(k, v)[v1.ResourceName(k)]
	}
	return out, out.DeepCopy()
}

func (e extended) InUse() v1.ResourceList { return nil }

// devices is an ExtendedResources hook with separate counts.
type devices struct{ capacity, allocatable, inUse v1.ResourceList }

func (d devices) Resources() (capacity, allocatable v1.ResourceList) {
	return d.capacity, d.allocatable
}
func (d devices) InUse() v1.ResourceList { return d.inUse }

// TestExtendedCapacityCountsUnhealthyDevices: capacity counts every
// device, allocatable only the healthy ones, as the kubelet reports them;
// the node's own resources stay.
func TestExtendedCapacityCountsUnhealthyDevices(t *testing.T) {
	m := newTestManager(t, Config{
		CapacityOverride: rl("cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi"),
		Extended:         devices{capacity: rl("example.com/gpu", "4"), allocatable: rl("example.com/gpu", "3")},
	})
	c, a := m.Capacity(), m.Allocatable()
	if q := c["example.com/gpu"]; q.Value() != 4 {
		t.Errorf("capacity example.com/gpu = %s, want 4", q.String())
	}
	if q := a["example.com/gpu"]; q.Value() != 3 {
		t.Errorf("allocatable example.com/gpu = %s, want 3", q.String())
	}
	if q := c[v1.ResourceCPU]; q.String() != "2" {
		t.Errorf("capacity cpu = %s, want 2 next to the devices", q.String())
	}
}

// TestAdmitCountsDevicesHeldFromTheCheckpoint: after a restart, before the
// plugin registers again (allocatable 0), pods holding devices from the
// checkpoint still fit; a new pod does not.
func TestAdmitCountsDevicesHeldFromTheCheckpoint(t *testing.T) {
	m := newTestManager(t, Config{
		CapacityOverride: rl("cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi"),
		Extended: devices{capacity: rl("example.com/gpu", "0"), allocatable: rl("example.com/gpu", "0"),
			inUse: rl("example.com/gpu", "2")},
	})
	gpu := func(name string) *v1.Pod {
		return mkPod(name, ctr("c", rl("example.com/gpu", "1"), rl("example.com/gpu", "1")))
	}
	a, b := withUID(gpu("a"), "a"), withUID(gpu("b"), "b")
	if ok, reason, msg := m.Admit(a, nil); !ok {
		t.Fatalf("running pod a rejected: %s %s", reason, msg)
	}
	if ok, reason, msg := m.Admit(b, []*v1.Pod{a}); !ok {
		t.Fatalf("running pod b rejected: %s %s", reason, msg)
	}
	ok, reason, msg := m.Admit(withUID(gpu("c"), "c"), []*v1.Pod{a, b})
	if ok || reason != "OutOfexample.com/gpu" || msg != "Node didn't have enough resource: example.com/gpu, requested: 1, used: 2, capacity: 2" {
		t.Fatalf("new pod c: Admit = %v %q %q, want OutOfexample.com/gpu", ok, reason, msg)
	}
}
