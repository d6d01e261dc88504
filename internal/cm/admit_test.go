package cm

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestAdmit(t *testing.T) {
	m := newTestManager(t, Config{
		CapacityOverride: rl("cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi"),
		MaxPods:          3,
		Extended:         extended{"example.com/gpu": "1"},
	})
	cpuPod := func(name, cpu string) *v1.Pod { return mkPod(name, ctr("c", rl("cpu", cpu), nil)) }
	memPod := func(name, mem string) *v1.Pod { return mkPod(name, ctr("c", rl("memory", mem), nil)) }
	for _, tc := range []struct {
		name       string
		pod        *v1.Pod
		active     []*v1.Pod
		wantReason string
		wantMsg    string
	}{
		{"fits", cpuPod("a", "500m"), []*v1.Pod{cpuPod("b", "1500m")}, "", ""},
		{"cpu over", cpuPod("a", "500m"), []*v1.Pod{cpuPod("b", "1"), cpuPod("c", "600m")}, "OutOfcpu",
			"Node didn't have enough resource: cpu, requested: 500, used: 1600, capacity: 2000"},
		{"memory over", memPod("a", "3Gi"), []*v1.Pod{memPod("b", "2Gi")}, "OutOfmemory",
			fmt.Sprintf("Node didn't have enough resource: memory, requested: %d, used: %d, capacity: %d", 3<<30, 2<<30, 4<<30)},
		{"ephemeral storage over", mkPod("a", ctr("c", rl("ephemeral-storage", "11Gi"), nil)), nil, "OutOfephemeral-storage", ""},
		{"pods full", seedBestEffort(), []*v1.Pod{seedBurstable(), seedGuaranteed(), cpuPod("x", "1m")}, "OutOfpods",
			"Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{"besteffort fits on a full cpu node", seedBestEffort(), []*v1.Pod{cpuPod("b", "2")}, "", ""},
		{"itself in active list is not counted", withUID(cpuPod("a", "2"), "same"), []*v1.Pod{withUID(cpuPod("a", "2"), "same")}, "", ""},
		{"extended over", mkPod("a", ctr("c", rl("example.com/gpu", "1"), rl("example.com/gpu", "1"))),
			[]*v1.Pod{mkPod("b", ctr("c", rl("example.com/gpu", "1"), rl("example.com/gpu", "1")))}, "OutOfexample.com/gpu",
			"Node didn't have enough resource: example.com/gpu, requested: 1, used: 1, capacity: 1"},
		{"unknown extended left to the device manager", mkPod("a", ctr("c", rl("other.io/fpga", "1"), rl("other.io/fpga", "1"))), nil, "", ""},
		{"init container max counts", func() *v1.Pod {
			p := cpuPod("a", "100m")
			p.Spec.InitContainers = []v1.Container{ctr("init", rl("cpu", "3"), nil)}
			return p
		}(), nil, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{"overhead counts", func() *v1.Pod {
			p := cpuPod("a", "1")
			p.Spec.Overhead = rl("cpu", "1001m")
			return p
		}(), nil, "OutOfcpu", ""},
		{"request above limit", mkPod("a", ctr("c", rl("cpu", "2"), rl("cpu", "1"))), nil, ReasonFailedValidation,
			"spec.containers[0](c).resources.requests[cpu] 2: must be less than or equal to cpu limit 1"},
		{"negative request", mkPod("a", ctr("c", rl("memory", "-1Mi"), nil)), nil, ReasonFailedValidation,
			"spec.containers[0](c).resources.requests[memory] -1Mi: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason, msg := m.Admit(tc.pod, tc.active)
			if ok != (tc.wantReason == "") || reason != tc.wantReason {
				t.Fatalf("Admit = %v, %q, %q; want reason %q", ok, reason, msg, tc.wantReason)
			}
			if !strings.Contains(msg, tc.wantMsg) {
				t.Fatalf("message = %q, want it to contain %q", msg, tc.wantMsg)
			}
		})
	}
}

func TestAllocatableAfterEvictionIsWhatAdmissionUses(t *testing.T) {
	m := newTestManager(t, Config{
		CapacityOverride: rl("cpu", "2", "memory", "1Gi", "ephemeral-storage", "10Gi"),
		EvictionHard:     map[string]string{"memory.available": "100Mi"},
	})
	ok, reason, msg := m.Admit(mkPod("a", ctr("c", rl("memory", "1000Mi"), nil)), nil)
	if ok || reason != "OutOfmemory" || !strings.Contains(msg, fmt.Sprintf("capacity: %d", 924<<20)) {
		t.Fatalf("Admit = %v %q %q; want OutOfmemory against 924Mi", ok, reason, msg)
	}
}
