package cm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events/eventstest"
)

// helperEnv makes the test binary a long-lived workload process: once
// released (one byte on stdin, sent after it joined its cgroup) it touches
// 8 MiB, so the memory is charged to its cgroup, and blocks until killed.
const helperEnv = "MINILET_CM_TEST_HELPER"

var ballast []byte

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "block" {
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		ballast = make([]byte, 8<<20)
		for i := range len(ballast) / 4096 {
			ballast[i*4096] = 1
		}
		_, _ = os.Stdin.Read(b[:])
		os.Exit(int(ballast[0]) - 1)
	}
	os.Exit(m.Run())
}

// startIn starts a blocked workload process and moves it into cgroup n;
// it is killed and reaped when the test ends. The returned channel is
// closed when the process has exited.
func startIn(t *testing.T, m *Manager, n cgroups.Name) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=block")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	if err := m.Driver().Create(n, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Driver().Join(n, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return cmd, done
}

func cgFile(t *testing.T, controller, cgPath, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroups.DefaultMountRoot, controller, cgPath, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func expectFile(t *testing.T, controller, cgPath, file string, want int64) {
	t.Helper()
	if got := cgFile(t, controller, cgPath, file); got != strconv.FormatInt(want, 10) {
		t.Errorf("%s%s/%s = %s, want %d", controller, cgPath, file, got, want)
	}
}

const gi = int64(1) << 30

// TestHierarchySeedExample reproduces the seed's worked example on real
// cgroup v1: a 3-core 8G node with --qos-reserved=memory=100% running
// pod-guaranteed-1, pod-burstable-1 and pod-besteffort-1.
func TestHierarchySeedExample(t *testing.T) {
	m := startedManager(t, Config{QOSReservedMemoryPercent: 100})
	root := testCgroupRoot(t)
	kp, bu, be := root+"/kubepods", root+"/kubepods/burstable", root+"/kubepods/besteffort"

	expectFile(t, "cpu", kp, "cpu.shares", 3072)
	expectFile(t, "memory", kp, "memory.limit_in_bytes", 8*gi)
	expectFile(t, "cpu", bu, "cpu.shares", 2)
	expectFile(t, "cpu", be, "cpu.shares", 2)
	expectFile(t, "memory", bu, "memory.limit_in_bytes", 8*gi)

	g, b, e := withUID(seedGuaranteed(), "g1"), withUID(seedBurstable(), "b1"), withUID(seedBestEffort(), "e1")
	if err := m.EnsurePod(g); err != nil {
		t.Fatal(err)
	}
	// One 1G Guaranteed pod: both lower tiers get 7G.
	expectFile(t, "memory", bu, "memory.limit_in_bytes", 7*gi)
	expectFile(t, "memory", be, "memory.limit_in_bytes", 7*gi)
	for _, p := range []*v1.Pod{b, e} {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	// Plus a Burstable pod requesting 2G: besteffort drops to 5G, and the
	// burstable tier's shares are its pods' requests (2 CPUs).
	expectFile(t, "memory", bu, "memory.limit_in_bytes", 7*gi)
	expectFile(t, "memory", be, "memory.limit_in_bytes", 5*gi)
	expectFile(t, "cpu", bu, "cpu.shares", 2048)
	expectFile(t, "cpu", be, "cpu.shares", 2)

	gp, bp, ep := m.CgroupParent(g), m.CgroupParent(b), m.CgroupParent(e)
	if gp != kp+"/podg1" || bp != bu+"/podb1" || ep != be+"/pode1" {
		t.Fatalf("pod cgroups %s %s %s", gp, bp, ep)
	}
	expectFile(t, "cpu", gp, "cpu.shares", 1024)
	expectFile(t, "cpu", gp, "cpu.cfs_quota_us", 100000)
	expectFile(t, "memory", gp, "memory.limit_in_bytes", gi)
	expectFile(t, "cpu", bp, "cpu.shares", 2048)
	expectFile(t, "cpu", bp, "cpu.cfs_quota_us", 300000)
	expectFile(t, "memory", bp, "memory.limit_in_bytes", 3*gi)
	expectFile(t, "cpu", ep, "cpu.shares", 2)
	expectFile(t, "cpu", ep, "cpu.cfs_quota_us", -1)

	// The burstable pod goes: its cgroup is removed and the tiers follow.
	if err := m.RemovePod(context.Background(), b.UID); err != nil {
		t.Fatal(err)
	}
	if m.Driver().Exists(m.podName(v1.PodQOSBurstable, b.UID)) {
		t.Error("removed pod's cgroup still exists")
	}
	expectFile(t, "cpu", bu, "cpu.shares", 2)
	expectFile(t, "memory", be, "memory.limit_in_bytes", 7*gi)
	if err := m.RemovePod(context.Background(), "never-existed"); err != nil {
		t.Errorf("removing an unknown pod: %v", err)
	}
}

func TestPodPidsLimitAndNoReservation(t *testing.T) {
	m := startedManager(t, Config{PodPidsLimit: 64, KubeReserved: rl("cpu", "1", "memory", "2Gi")})
	root := testCgroupRoot(t)
	// kubepods is capacity minus reservations (pods enforced by default).
	expectFile(t, "cpu", root+"/kubepods", "cpu.shares", 2048)
	expectFile(t, "memory", root+"/kubepods", "memory.limit_in_bytes", 6*gi)
	p := withUID(seedBurstable(), "b2")
	if err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	if got := cgFile(t, "pids", m.CgroupParent(p), "pids.max"); got != "64" {
		t.Errorf("pod pids.max = %s, want 64", got)
	}
	// No qos-reserved: the tiers have no memory limit.
	if got := cgFile(t, "memory", root+"/kubepods/besteffort", "memory.limit_in_bytes"); len(got) < 18 {
		t.Errorf("besteffort memory limit = %s, want unlimited", got)
	}
}

// TestRemovePodKillsLeftovers: a process still in a pod's container cgroup
// is killed before the cgroup is removed.
func TestRemovePodKillsLeftovers(t *testing.T) {
	m := startedManager(t, Config{})
	p := withUID(seedBestEffort(), "leftover")
	if err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	_, done := startIn(t, m, m.podName(v1.PodQOSBestEffort, p.UID).Child("ctr1"))
	if err := m.RemovePod(context.Background(), p.UID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("leftover process still running 30s after RemovePod")
	}
	if m.Driver().Exists(m.podName(v1.PodQOSBestEffort, p.UID)) {
		t.Error("pod cgroup still exists")
	}
}

// A pod cgroup left in only some hierarchies (a removal that failed
// half-way) is still removed by RemovePod, which used to skip it for good.
func TestRemovePodFinishesHalfRemovedCgroup(t *testing.T) {
	m := startedManager(t, Config{})
	p := withUID(seedBestEffort(), "halfremoved")
	if err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	path := m.Driver().Path(m.podName(v1.PodQOSBestEffort, p.UID))
	if err := os.Remove(filepath.Join(cgroups.DefaultMountRoot, "cpu", path)); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(cgroups.DefaultMountRoot, "memory", path)
	if _, err := os.Stat(mem); err != nil {
		t.Fatalf("memory cgroup should still be there: %v", err)
	}
	if err := m.RemovePod(context.Background(), p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem); !os.IsNotExist(err) {
		t.Fatalf("memory cgroup %s survived RemovePod: %v", mem, err)
	}
}

// TestCleanupOrphans: at start, cgroups of pods that no longer exist are
// removed, and a live pod's cgroup and process are left alone.
func TestCleanupOrphans(t *testing.T) {
	m := startedManager(t, Config{})
	live, orphanG, orphanB := withUID(seedBurstable(), "live"), withUID(seedGuaranteed(), "og"), withUID(seedBestEffort(), "ob")
	for _, p := range []*v1.Pod{live, orphanG, orphanB} {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	liveCmd, liveDone := startIn(t, m, m.podName(v1.PodQOSBurstable, live.UID).Child("c"))
	_, orphanDone := startIn(t, m, m.podName(v1.PodQOSGuaranteed, orphanG.UID).Child("c"))

	// A fresh manager, as after an agent restart, knows no pods.
	m2 := newTestManager(t, Config{CgroupRoot: testCgroupRoot(t), CgroupsPerQOS: true})
	if err := m2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m2.CleanupOrphans(context.Background(), map[types.UID]bool{live.UID: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-orphanDone:
	case <-time.After(30 * time.Second):
		t.Fatal("orphan pod's process still running")
	}
	for _, p := range []*v1.Pod{orphanG, orphanB} {
		if m2.Driver().Exists(m2.podName(podClass(p), p.UID)) {
			t.Errorf("orphan %s still has a cgroup", p.UID)
		}
	}
	if !m2.Driver().Exists(m2.podName(v1.PodQOSBurstable, live.UID)) {
		t.Fatal("live pod's cgroup was removed")
	}
	select {
	case <-liveDone:
		t.Fatal("live pod's process was killed")
	default:
	}
	pids, err := m2.Driver().Pids(m2.podName(v1.PodQOSBurstable, live.UID))
	if err != nil || len(pids) != 1 || pids[0] != liveCmd.Process.Pid {
		t.Fatalf("live pod pids = %v, %v; want [%d]", pids, err, liveCmd.Process.Pid)
	}
}

func TestEnsurePodBadInput(t *testing.T) {
	rec := &eventstest.Recorder{}
	m := startedManager(t, Config{Recorder: rec})
	good := withUID(seedGuaranteed(), "good")
	if err := m.EnsurePod(good); err != nil {
		t.Fatal(err)
	}
	bad := withUID(mkPod("bad", ctr("c", rl("memory", "2Gi"), rl("memory", "1Gi"))), "bad")
	err := m.EnsurePod(bad)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "requests[memory]") {
		t.Fatalf("EnsurePod(bad) = %v, want invalid argument naming requests[memory]", err)
	}
	// Start enforced allocatable on pods: the node's event, then the pod's warning.
	if ev := rec.Events(); len(ev) != 2 || ev[0] != "Normal NodeAllocatableEnforced Updated Node Allocatable limit across pods" ||
		!strings.Contains(ev[1], "Warning "+ReasonFailedCreatePodContainer) {
		t.Errorf("events = %q, want NodeAllocatableEnforced then one %s warning", ev, ReasonFailedCreatePodContainer)
	}
	if m.Driver().Exists(m.podName(v1.PodQOSBurstable, bad.UID)) {
		t.Error("a cgroup was created for the bad pod")
	}
	if !m.Driver().Exists(m.podName(v1.PodQOSGuaranteed, good.UID)) {
		t.Error("the good pod's cgroup is gone")
	}
}

func TestStartFailsNamingCgroupRoot(t *testing.T) {
	requireCgroupV1(t)
	// A control file cannot have children: mkdir fails with ENOTDIR.
	m := newTestManager(t, Config{CgroupRoot: "/cgroup.procs/minilet", CgroupsPerQOS: true})
	err := m.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--cgroup-root") {
		t.Fatalf("Start with an uncreatable root: err = %v, want it to name --cgroup-root", err)
	}
}

func TestSummary(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := startedManager(t, Config{Clock: clk, NodeName: "node-a"})
	p := withUID(seedBurstable(), "sum")
	if err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	ctrCgroup := m.podName(v1.PodQOSBurstable, p.UID).Child("abc123")
	cmd, _ := startIn(t, m, ctrCgroup)
	// Wait until the workload has touched its memory inside the cgroup.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := m.Driver().Stats(ctrCgroup)
		if err != nil {
			t.Fatal(err)
		}
		if st.MemoryRSS >= 4<<20 { // of 8Mi touched; a few pages may predate the move
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload never charged 4Mi to its cgroup: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Status.ContainerStatuses = []v1.ContainerStatus{
		{Name: "container1", ContainerID: "minilet://abc123", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
		{Name: "container2", ContainerID: "minilet://gone", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}},
	}
	s, err := m.Summary(context.Background(), []*v1.Pod{p})
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.NodeName != "node-a" || s.Node.CPU == nil || *s.Node.CPU.UsageCoreNanoSeconds == 0 ||
		s.Node.Memory == nil || *s.Node.Memory.WorkingSetBytes == 0 || s.Node.Fs == nil || s.Node.Rlimit == nil {
		t.Fatalf("node stats incomplete: %+v", s.Node)
	}
	if s.Node.CPU.UsageNanoCores != nil {
		t.Error("usageNanoCores on the first sample")
	}
	if len(s.Node.SystemContainers) != 1 || s.Node.SystemContainers[0].Name != "pods" {
		t.Errorf("system containers = %+v, want pods", s.Node.SystemContainers)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("pods = %d", len(s.Pods))
	}
	ps := s.Pods[0]
	if ps.PodRef.UID != "sum" || ps.Memory == nil || *ps.Memory.WorkingSetBytes == 0 || *ps.Memory.RSSBytes == 0 ||
		ps.ProcessStats == nil || *ps.ProcessStats.ProcessCount != 1 {
		t.Fatalf("pod stats for a pod running pid %d: %+v", cmd.Process.Pid, ps)
	}
	if ps.Memory.AvailableBytes == nil || *ps.Memory.AvailableBytes > uint64(3*gi) {
		t.Errorf("pod memory available should be bounded by the 3Gi limit: %v", ps.Memory.AvailableBytes)
	}
	if len(ps.Containers) != 1 || ps.Containers[0].Name != "container1" || *ps.Containers[0].Memory.WorkingSetBytes == 0 {
		t.Fatalf("containers = %+v, want container1 only", ps.Containers)
	}

	clk.Step(time.Second)
	s, err = m.Summary(context.Background(), []*v1.Pod{p})
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.CPU.UsageNanoCores == nil || s.Pods[0].CPU.UsageNanoCores == nil || s.Pods[0].Containers[0].CPU.UsageNanoCores == nil {
		t.Fatal("usageNanoCores missing on the second sample")
	}
}

func podClass(p *v1.Pod) v1.PodQOSClass {
	switch p.Name {
	case "pod-guaranteed-1":
		return v1.PodQOSGuaranteed
	case "pod-burstable-1":
		return v1.PodQOSBurstable
	}
	return v1.PodQOSBestEffort
}

// TestConcurrentEnsurePod: pod workers place pods in parallel; the tier
// values must end up reflecting every pod.
func TestConcurrentEnsurePod(t *testing.T) {
	m := startedManager(t, Config{QOSReservedMemoryPercent: 100})
	const n = 24
	errs := make(chan error, n)
	for i := range n {
		go func() {
			p := withUID(mkPod("p"+strconv.Itoa(i), ctr("c", rl("cpu", "100m", "memory", "10Mi"), nil)), "conc"+strconv.Itoa(i))
			errs <- m.EnsurePod(p)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	root := testCgroupRoot(t)
	expectFile(t, "cpu", root+"/kubepods/burstable", "cpu.shares", n*100*1024/1000)
	expectFile(t, "memory", root+"/kubepods/besteffort", "memory.limit_in_bytes", 8*gi-n*10<<20)
	kids, err := m.Driver().Children(m.kubepods.Child(burstableName))
	if err != nil || len(kids) != n {
		t.Fatalf("burstable pods = %d (%v), want %d", len(kids), err, n)
	}
}
