package cm

import (
	"github.com/minilet/minilet/internal/cm/cgroups"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodCgroupResources(t *testing.T) {
	type want struct {
		shares uint64
		quota  int64
		memory int64
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		pids int64
		want want
	}{
		// The seed: pod-guaranteed-1 gets shares 1024, quota of 1 CPU, 1Gi.
		{"seed guaranteed", seedGuaranteed(), 0, want{1024, 100000, 1 << 30}},
		// pod-burstable-1: shares 2048 (sum of requests), quota 3 CPUs, 3Gi.
		{"seed burstable", seedBurstable(), 0, want{2048, 300000, 3 << 30}},
		{"seed besteffort", seedBestEffort(), 0, want{2, -1, -1}},
		{"burstable without all cpu limits", mkPod("p",
			ctr("a", rl("cpu", "250m", "memory", "64Mi"), rl("cpu", "500m", "memory", "128Mi")),
			ctr("b", rl("cpu", "250m"), rl("memory", "64Mi"))), 0, want{512, -1, 192 << 20}},
		{"burstable requests only", mkPod("p", ctr("a", rl("cpu", "100m"), nil)), 0, want{102, -1, -1}},
		{"tiny limit gets the minimum quota", mkPod("p", ctr("a", rl("cpu", "5m", "memory", "8Mi"), rl("cpu", "5m", "memory", "8Mi"))), 0, want{5, 1000, 8 << 20}},
		{"pids limit", seedBestEffort(), 256, want{2, -1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := podCgroupResources(tc.pod, tc.pids)
			got := want{*r.CPUShares, *r.CPUQuota, *r.Memory}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if *r.CPUPeriod != 100000 {
				t.Errorf("period = %d", *r.CPUPeriod)
			}
			wantPids := int64(-1)
			if tc.pids > 0 {
				wantPids = tc.pids
			}
			if *r.PidsLimit != wantPids {
				t.Errorf("pids = %d, want %d", *r.PidsLimit, wantPids)
			}
		})
	}
}

func TestContainerResources(t *testing.T) {
	const memCap = 8 << 30
	b := seedBurstable()
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		c    *v1.Container
		want *runtimeapi.LinuxContainerResources
	}{
		{"seed guaranteed container3", seedGuaranteed(), nil,
			&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30, OomScoreAdj: -997}},
		{"seed burstable container2", b, &b.Spec.Containers[1],
			&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 200000, CpuPeriod: 100000, MemoryLimitInBytes: 2 << 30, OomScoreAdj: 875}},
		{"besteffort", seedBestEffort(), nil,
			&runtimeapi.LinuxContainerResources{CpuShares: 2, CpuQuota: -1, CpuPeriod: 100000, OomScoreAdj: 1000}},
		{"limit only: shares from the limit", mkPod("p", ctr("c", nil, rl("cpu", "200m"))), nil,
			&runtimeapi.LinuxContainerResources{CpuShares: 204, CpuQuota: 20000, CpuPeriod: 100000, OomScoreAdj: 999}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if c == nil {
				c = &tc.pod.Spec.Containers[0]
			}
			got := containerResources(tc.pod, c, memCap)
			if got.CpuShares != tc.want.CpuShares || got.CpuQuota != tc.want.CpuQuota || got.CpuPeriod != tc.want.CpuPeriod ||
				got.MemoryLimitInBytes != tc.want.MemoryLimitInBytes || got.OomScoreAdj != tc.want.OomScoreAdj {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCgroupParentNaming(t *testing.T) {
	requireCgroupV1(t)
	for _, tc := range []struct {
		driver, root string
		pod          *v1.Pod
		want         string
	}{
		{"cgroupfs", "/", withUID(seedGuaranteed(), "u1"), "/kubepods/podu1"},
		{"cgroupfs", "/minilet", withUID(seedBurstable(), "u2"), "/minilet/kubepods/burstable/podu2"},
		{"cgroupfs", "", withUID(seedBestEffort(), "u3"), "/kubepods/besteffort/podu3"},
		{"systemd", "/", withUID(seedBurstable(), "ab-cd"), "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab_cd.slice"},
	} {
		cfg := Config{CgroupDriver: tc.driver, CgroupRoot: tc.root, CgroupsPerQOS: true}
		if tc.driver == "systemd" {
			// Only the naming is under test: the files alone, since the
			// slices need systemd's D-Bus API (run in test/hosts).
			d, err := cgroups.New(cgroups.Config{Naming: cgroups.NamingSystemd})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Driver = d
		}
		m := newTestManager(t, cfg)
		if got := m.CgroupParent(tc.pod); got != tc.want {
			t.Errorf("%s root %q: CgroupParent = %s, want %s", tc.driver, tc.root, got, tc.want)
		}
		uid, ok := m.podUIDFromChild(lastElem(tc.want))
		if !ok || uid != tc.pod.UID {
			t.Errorf("podUIDFromChild(%s) = %q, %v; want %s", lastElem(tc.want), uid, ok, tc.pod.UID)
		}
	}
	m := newTestManager(t, Config{CgroupRoot: "/minilet"})
	if got := m.CgroupParent(seedBurstable()); got != "/minilet" {
		t.Errorf("without cgroups-per-qos: CgroupParent = %s, want /minilet", got)
	}
}

func lastElem(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
