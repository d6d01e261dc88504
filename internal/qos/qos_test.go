package qos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func ctr(name string, req, lim v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
}

func podOf(cs ...v1.Container) *v1.Pod {
	return &v1.Pod{Spec: v1.PodSpec{Containers: cs}}
}

// The seed's three example pods.
func seedGuaranteed() *v1.Pod {
	return podOf(ctr("container3", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")))
}

func seedBurstable() *v1.Pod {
	return podOf(
		ctr("container1", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")),
		ctr("container2", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "2", "memory", "2Gi")),
	)
}

func TestPodQOSClass(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	sidecarPod := podOf(ctr("a", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")))
	sidecarPod.Spec.InitContainers = []v1.Container{ctr("s", nil, nil)}
	sidecarPod.Spec.InitContainers[0].RestartPolicy = &always
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"seed guaranteed", seedGuaranteed(), v1.PodQOSGuaranteed},
		{"seed burstable", seedBurstable(), v1.PodQOSBurstable},
		{"seed besteffort", podOf(ctr("c", nil, nil)), v1.PodQOSBestEffort},
		{"only extended resources is besteffort", podOf(ctr("c", rl("example.com/gpu", "1"), rl("example.com/gpu", "1"))), v1.PodQOSBestEffort},
		{"zero quantities are besteffort", podOf(ctr("c", rl("cpu", "0"), rl("memory", "0"))), v1.PodQOSBestEffort},
		{"request only", podOf(ctr("c", rl("cpu", "100m"), nil)), v1.PodQOSBurstable},
		{"limits without requests (undefaulted)", podOf(ctr("c", nil, rl("cpu", "1", "memory", "1Gi"))), v1.PodQOSBurstable},
		{"cpu only guaranteed-looking", podOf(ctr("c", rl("cpu", "1"), rl("cpu", "1"))), v1.PodQOSBurstable},
		{"one besteffort container breaks guaranteed", podOf(
			ctr("a", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")), ctr("b", nil, nil)), v1.PodQOSBurstable},
		{"init container without limits breaks guaranteed", func() *v1.Pod {
			p := seedGuaranteed()
			p.Spec.InitContainers = []v1.Container{ctr("init", nil, nil)}
			return p
		}(), v1.PodQOSBurstable},
		{"sidecar without limits breaks guaranteed", sidecarPod, v1.PodQOSBurstable},
		{"init container with requests makes besteffort burstable", func() *v1.Pod {
			p := podOf(ctr("c", nil, nil))
			p.Spec.InitContainers = []v1.Container{ctr("init", rl("memory", "10Mi"), nil)}
			return p
		}(), v1.PodQOSBurstable},
		{"status is ignored", func() *v1.Pod {
			p := podOf(ctr("c", nil, nil))
			p.Status.QOSClass = v1.PodQOSGuaranteed
			return p
		}(), v1.PodQOSBestEffort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodQOSClass(tc.pod); got != tc.want {
				t.Fatalf("PodQOSClass = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMilliCPUToShares(t *testing.T) {
	for _, tc := range []struct {
		milli int64
		want  uint64
	}{
		{0, 2}, {-5, 2}, {1, 2}, {2, 2}, {3, 3}, {100, 102}, {250, 256}, {500, 512},
		{1000, 1024}, // seed: 1 CPU -> 1024
		{2000, 2048}, // seed: burstable tier with two 1-CPU requests
		{3000, 3072}, // seed: kubepods on a 3-core machine
		{256000, 262144}, {300000, 262144},
	} {
		if got := MilliCPUToShares(tc.milli); got != tc.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.want)
		}
	}
}

func TestMilliCPUToQuota(t *testing.T) {
	for _, tc := range []struct {
		milli, period, want int64
	}{
		{0, 100000, -1},
		{-1, 100000, -1},
		{1, 100000, 1000}, // floor
		{9, 100000, 1000},
		{10, 100000, 1000},
		{11, 100000, 1100},
		{200, 100000, 20000},
		{1000, 100000, 100000}, // seed: 1 CPU
		{2000, 100000, 200000}, // seed: container2 limit 2
		{3000, 100000, 300000}, // seed: pod-burstable-1 sum of limits
		{500, 50000, 25000},
	} {
		if got := MilliCPUToQuota(tc.milli, tc.period); got != tc.want {
			t.Errorf("MilliCPUToQuota(%d, %d) = %d, want %d", tc.milli, tc.period, got, tc.want)
		}
	}
}

func TestPodRequestsAndLimits(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name           string
		pod            *v1.Pod
		wantReqCPU     int64
		wantReqMem     int64
		wantLimCPU     int64
		wantAllCPULims bool
	}{
		{"seed burstable sums", seedBurstable(), 2000, 2 << 30, 3000, true},
		{"seed guaranteed", seedGuaranteed(), 1000, 1 << 30, 1000, true},
		{"besteffort", podOf(ctr("c", nil, nil)), 0, 0, 0, false},
		{"missing cpu limit", podOf(ctr("a", rl("cpu", "1"), rl("cpu", "1")), ctr("b", rl("cpu", "1"), nil)), 2000, 0, 1000, false},
		{"init container max wins", func() *v1.Pod {
			p := podOf(ctr("a", rl("cpu", "500m", "memory", "100Mi"), nil))
			p.Spec.InitContainers = []v1.Container{
				ctr("i1", rl("cpu", "2", "memory", "10Mi"), rl("cpu", "2")),
				ctr("i2", rl("cpu", "1", "memory", "300Mi"), nil),
			}
			return p
		}(), 2000, 300 << 20, 2000, false},
		{"sidecars add up and raise later inits", func() *v1.Pod {
			p := podOf(ctr("a", rl("cpu", "500m"), nil))
			p.Spec.InitContainers = []v1.Container{
				ctr("side", rl("cpu", "200m"), nil),
				ctr("init", rl("cpu", "600m"), nil),
			}
			p.Spec.InitContainers[0].RestartPolicy = &always
			return p
		}(), 800, 0, 0, false},
		{"overhead added", func() *v1.Pod {
			p := seedGuaranteed()
			p.Spec.Overhead = rl("cpu", "250m", "memory", "64Mi")
			return p
		}(), 1250, 1<<30 + 64<<20, 1250, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, lim := PodRequests(tc.pod), PodLimits(tc.pod)
			if got := MilliCPU(req); got != tc.wantReqCPU {
				t.Errorf("cpu request = %dm, want %dm", got, tc.wantReqCPU)
			}
			if got := MemoryBytes(req); got != tc.wantReqMem {
				t.Errorf("memory request = %d, want %d", got, tc.wantReqMem)
			}
			if got := MilliCPU(lim); got != tc.wantLimCPU {
				t.Errorf("cpu limit = %dm, want %dm", got, tc.wantLimCPU)
			}
			if got := AllContainersLimit(tc.pod, v1.ResourceCPU); got != tc.wantAllCPULims {
				t.Errorf("AllContainersLimit(cpu) = %v, want %v", got, tc.wantAllCPULims)
			}
		})
	}
}

func TestContainerOOMScoreAdj(t *testing.T) {
	const capacity = 8 << 30
	always := v1.ContainerRestartPolicyAlways
	critical := podOf(ctr("c", nil, nil))
	critical.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	critical.Spec.PriorityClassName = "system-node-critical"
	burst := func(req string) *v1.Pod { return podOf(ctr("c", rl("memory", req), nil)) }
	withSidecar := podOf(ctr("app", rl("memory", "4Gi"), nil))
	withSidecar.Spec.InitContainers = []v1.Container{ctr("side", rl("memory", "800Mi"), nil)}
	withSidecar.Spec.InitContainers[0].RestartPolicy = &always
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		c    *v1.Container
		want int
	}{
		{"guaranteed", seedGuaranteed(), nil, -997},
		{"besteffort", podOf(ctr("c", nil, nil)), nil, 1000},
		{"node critical static pod", critical, nil, -997},
		{"burstable 10%", burst("819.2Mi"), nil, 900},
		{"burstable half", burst("4Gi"), nil, 500},
		{"burstable tiny request stays below besteffort", burst("1"), nil, 999},
		{"burstable no memory request", podOf(ctr("c", rl("cpu", "1"), nil)), nil, 999},
		{"burstable request above capacity floors at 3", burst("16Gi"), nil, 3},
		{"burstable 99.9% floors at 3", burst("8180Mi"), nil, 3},
		{"sidecar capped by smallest app container", withSidecar, &withSidecar.Spec.InitContainers[0], 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if c == nil {
				c = &tc.pod.Spec.Containers[0]
			}
			if got := ContainerOOMScoreAdj(tc.pod, c, capacity); got != tc.want {
				t.Fatalf("ContainerOOMScoreAdj = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReservedMemoryLimits(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		name                        string
		alloc, guar, burst, percent int64
		wantBurst, wantBE           int64
	}{
		// The seed: 8G allocatable, memory=100%.
		{"seed: one 1G guaranteed pod", 8 * gi, 1 * gi, 0, 100, 7 * gi, 7 * gi},
		{"seed: plus a 2G burstable pod", 8 * gi, 1 * gi, 2 * gi, 100, 7 * gi, 5 * gi},
		{"50 percent", 8 * gi, 2 * gi, 2 * gi, 50, 7 * gi, 6 * gi},
		{"off", 8 * gi, 2 * gi, 2 * gi, 0, 8 * gi, 8 * gi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, be := ReservedMemoryLimits(tc.alloc, tc.guar, tc.burst, tc.percent)
			if b != tc.wantBurst || be != tc.wantBE {
				t.Fatalf("got burstable=%d besteffort=%d, want %d %d", b, be, tc.wantBurst, tc.wantBE)
			}
		})
	}
}
