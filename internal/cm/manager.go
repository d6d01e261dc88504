// Package cm is the container manager: it measures the node (capacity and
// allocatable), admits pods that fit, and keeps the kubelet's cgroup
// hierarchy under --cgroup-root: kubepods, its burstable and besteffort
// tiers, and a cgroup per pod, with the QoS tiers updated as pods come and
// go. It also serves the Summary API from the same cgroups.
package cm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cm/systemd"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/hostlock"
	"github.com/minilet/minilet/internal/qos"
)

// Cgroup names of the hierarchy.
const (
	kubepodsName   = "kubepods"
	burstableName  = "burstable"
	besteffortName = "besteffort"
	podPrefix      = "pod"
)

// Event reasons the manager records.
const (
	// ReasonFailedCreatePodContainer is the kubelet's reason when a pod
	// cgroup cannot be created or updated.
	ReasonFailedCreatePodContainer = "FailedCreatePodContainer"
)

// Manager is the container manager. Create it with New and call Start
// before placing pods.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	clk    clock.Clock
	rec    events.Recorder
	driver cgroups.Driver

	root     cgroups.Name // --cgroup-root
	kubepods cgroups.Name

	capacity v1.ResourceList
	// reservedAllocatable is capacity minus kube- and system-reserved: the
	// kubepods limit and the base of the qos-reserved formulas.
	reservedAllocatable v1.ResourceList
	// allocatable also leaves the hard eviction thresholds out.
	allocatable v1.ResourceList

	mu   sync.Mutex
	lock *hostlock.Lock // on root, from Start to Close (see claim)
	pods map[types.UID]*podEntry
	// lastTiers are the values last written to the QoS tiers.
	lastTiers map[v1.PodQOSClass]tierValues

	stats statsCache
}

// podEntry is a pod whose cgroup the manager keeps.
type podEntry struct {
	name     cgroups.Name
	class    v1.PodQOSClass
	cpuMilli int64 // summed cpu requests
	memBytes int64 // summed memory requests
}

type tierValues struct {
	shares uint64
	memory int64
}

// New measures the node and prepares the manager; it touches no cgroup
// until Start.
func New(cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.RootDir == "" {
		cfg.RootDir = "/"
	}
	if cfg.LockDir == "" {
		cfg.LockDir = DefaultLockDir
	}
	if cfg.MaxPods == 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = events.Nop{}
	}
	root, err := cgroups.ParseCgroupfs(cfg.CgroupRoot)
	if err != nil {
		return nil, fmt.Errorf("--cgroup-root %q: %w", cfg.CgroupRoot, err)
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger, clk: cfg.Clock, rec: cfg.Recorder,
		root: root, kubepods: root.Child(kubepodsName),
		pods: map[types.UID]*podEntry{}, lastTiers: map[v1.PodQOSClass]tierValues{},
	}
	if m.capacity, err = machineCapacity(cfg.RootDir, cfg.MaxPods); err != nil {
		return nil, err
	}
	for name, q := range cfg.CapacityOverride {
		m.capacity[name] = q.DeepCopy()
	}
	m.reservedAllocatable = subtractReserved(m.capacity, cfg.KubeReserved, cfg.SystemReserved)
	evict, err := hardEvictionReserve(cfg.EvictionHard, m.capacity)
	if err != nil {
		return nil, err
	}
	m.allocatable = subtractReserved(m.reservedAllocatable, evict)

	m.driver = cfg.Driver
	if m.driver == nil {
		naming := cgroups.Naming(cfg.CgroupDriver)
		if m.driver, err = cgroups.New(cgroups.Config{MountRoot: cfg.CgroupMountRoot, Naming: naming, Clock: m.clk}); err != nil {
			return nil, fmt.Errorf("cgroup driver: %w", err)
		}
		// systemd's: the QoS and pod cgroups are slices systemd owns.
		if naming == cgroups.NamingSystemd {
			// The connection lives as long as its context: the agent's.
			if m.driver, err = systemd.Connect(context.Background(), m.driver); err != nil {
				return nil, fmt.Errorf("cgroupDriver: %w", err)
			}
		}
	}
	return m, nil
}

// Driver is the cgroup driver in use (for the runtime and benchmarks).
func (m *Manager) Driver() cgroups.Driver { return m.driver }

// Start creates the hierarchy: kubepods (cpu shares from allocatable cpu,
// memory limited to capacity minus reservations when "pods" is enforced)
// and the burstable and besteffort tiers. It fails, naming --cgroup-root,
// when they cannot be created, or when the root is not this agent's to
// take (see claim; Close gives it back).
func (m *Manager) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := m.claim(); err != nil {
		return err
	}
	if !m.cfg.CgroupsPerQOS {
		if len(m.root) > 0 && !m.driver.Exists(m.root) {
			if err := m.driver.Create(m.root, nil); err != nil {
				return fmt.Errorf("--cgroup-root %q: %w", m.cfg.CgroupRoot, err)
			}
		}
		return nil
	}
	limits := m.capacity
	if m.cfg.enforcePods() {
		limits = m.reservedAllocatable
	}
	cpu := limits[v1.ResourceCPU]
	shares := qos.MilliCPUToShares(cpu.MilliValue())
	mem := limits[v1.ResourceMemory]
	memBytes := mem.Value()
	if err := m.driver.Create(m.kubepods, &cgroups.Resources{CPUShares: &shares, Memory: &memBytes}); err != nil {
		return fmt.Errorf("--cgroup-root %q: create %s: %w", m.cfg.CgroupRoot, m.driver.Path(m.kubepods), err)
	}
	for _, tier := range []string{burstableName, besteffortName} {
		if err := m.driver.Create(m.kubepods.Child(tier), nil); err != nil {
			return fmt.Errorf("--cgroup-root %q: create %s: %w", m.cfg.CgroupRoot, m.driver.Path(m.kubepods.Child(tier)), err)
		}
	}
	if m.cfg.enforcePods() {
		// The kubelet's node event once pods are held to allocatable.
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.cfg.NodeName, UID: types.UID(m.cfg.NodeName)}}
		m.cfg.Recorder.Event(node, v1.EventTypeNormal, "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastTiers = map[v1.PodQOSClass]tierValues{}
	if err := m.updateTiersLocked(); err != nil {
		return fmt.Errorf("--cgroup-root %q: %w", m.cfg.CgroupRoot, err)
	}
	m.log.Info("cgroup hierarchy ready", "root", m.driver.Path(m.kubepods), "mode", m.driver.Mode().String(),
		"cpuShares", shares, "memoryLimit", memBytes)
	return nil
}

// podName is the pod's cgroup: kubepods/pod<UID> for Guaranteed pods,
// kubepods/<tier>/pod<UID> otherwise.
func (m *Manager) podName(class v1.PodQOSClass, uid types.UID) cgroups.Name {
	switch class {
	case v1.PodQOSGuaranteed:
		return m.kubepods.Child(podPrefix + string(uid))
	case v1.PodQOSBurstable:
		return m.kubepods.Child(burstableName).Child(podPrefix + string(uid))
	}
	return m.kubepods.Child(besteffortName).Child(podPrefix + string(uid))
}

// CgroupParent is the pod's cgroup path relative to each hierarchy root:
// the CRI PodSandboxConfig.Linux.CgroupParent.
func (m *Manager) CgroupParent(pod *v1.Pod) string {
	if !m.cfg.CgroupsPerQOS {
		return m.driver.Path(m.root)
	}
	return m.driver.Path(m.podName(qos.PodQOSClass(pod), pod.UID))
}

// ContainerResources is the CRI ContainerConfig.Linux.Resources for c:
// cpu_shares, cpu_quota (-1: none), cpu_period, memory_limit_in_bytes (0:
// none) and oom_score_adj by the kubelet's policy.
func (m *Manager) ContainerResources(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources {
	mem := m.capacity[v1.ResourceMemory]
	return containerResources(pod, c, mem.Value())
}

// EnsurePod creates or updates the pod's cgroup and updates the QoS tiers
// (tiers first, so reservations and shares are in place before the pod
// runs). Bad resources are an errdefs.ErrInvalidArgument naming the field.
// Failures are also recorded as a Warning event on the pod.
func (m *Manager) EnsurePod(pod *v1.Pod) error {
	err := m.ensurePod(pod)
	if err != nil {
		m.rec.Eventf(pod, v1.EventTypeWarning, ReasonFailedCreatePodContainer, "unable to ensure pod container exists: %v", err)
	}
	return err
}

func (m *Manager) ensurePod(pod *v1.Pod) error {
	if err := ValidatePodResources(pod); err != nil {
		return err
	}
	if !m.cfg.CgroupsPerQOS {
		return nil
	}
	reqs := qos.PodRequests(pod)
	e := &podEntry{class: qos.PodQOSClass(pod), cpuMilli: qos.MilliCPU(reqs), memBytes: qos.MemoryBytes(reqs)}
	e.name = m.podName(e.class, pod.UID)

	m.mu.Lock()
	prev, had := m.pods[pod.UID]
	m.pods[pod.UID] = e
	tierErr := m.updateTiersLocked()
	m.mu.Unlock()
	if tierErr != nil {
		m.log.Warn("updating QoS tiers", "pod", klogRef(pod), "err", tierErr)
	}

	if err := m.driver.Create(e.name, podCgroupResources(pod, m.cfg.PodPidsLimit)); err != nil {
		m.mu.Lock()
		if had {
			m.pods[pod.UID] = prev
		} else {
			delete(m.pods, pod.UID)
		}
		_ = m.updateTiersLocked()
		m.mu.Unlock()
		return fmt.Errorf("pod %s: cgroup %s: %w", klogRef(pod), m.driver.Path(e.name), err)
	}
	return nil
}

// UnboundPodCPU lifts the CFS quota of the pod's cgroup, if it has one,
// for an in-place resize: a container's quota may not exceed its pod's,
// so the pod's bound goes first and gets its new value (EnsurePod) after
// the containers have theirs.
func (m *Manager) UnboundPodCPU(pod *v1.Pod) error {
	if !m.cfg.CgroupsPerQOS {
		return nil
	}
	unlimited := int64(-1)
	name := m.podName(qos.PodQOSClass(pod), pod.UID)
	if err := m.driver.Update(name, &cgroups.Resources{CPUQuota: &unlimited}); err != nil {
		return fmt.Errorf("pod %s: cgroup %s: %w", klogRef(pod), m.driver.Path(name), err)
	}
	return nil
}

// RemovePod kills whatever is left in the pod's cgroup, removes it, and
// updates the QoS tiers. Removing an unknown pod is not an error.
func (m *Manager) RemovePod(ctx context.Context, uid types.UID) error {
	if !m.cfg.CgroupsPerQOS {
		return nil
	}
	var errs []error
	for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		// Destroy even when Exists says no: a cgroup left in only some
		// hierarchies (an earlier removal that failed half-way) must go
		// too. Destroying a missing cgroup does nothing.
		name := m.podName(class, uid)
		if err := m.driver.Destroy(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", uid, err))
		}
		m.removeHybridLeftover(m.driver.Path(name))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[uid]; ok {
		delete(m.pods, uid)
		if err := m.updateTiersLocked(); err != nil {
			m.log.Warn("updating QoS tiers", "podUID", uid, "err", err)
		}
	}
	return nil
}

// removeHybridLeftover removes the empty directories runc leaves for a pod
// in the cgroup2 mount that sits beside the v1 hierarchies on hybrid hosts
// (<mount root>/unified), which no driver manages. Nothing to do elsewhere.
func (m *Manager) removeHybridLeftover(path string) {
	root := m.cfg.CgroupMountRoot
	if root == "" {
		root = cgroups.DefaultMountRoot
	}
	dir := filepath.Join(root, "unified", path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(dir, e.Name())) // container dirs: empty once stopped
		}
	}
	_ = os.Remove(dir)
}

// CleanupOrphans removes the cgroups of pods not in keep (killing what is
// left in them); the pods in keep are never touched. Call it at start with
// the pods that still exist. It reaches only below this agent's kubepods:
// the agent holds --cgroup-root alone (see the agent's host locks).
func (m *Manager) CleanupOrphans(ctx context.Context, keep map[types.UID]bool) error {
	if !m.claimed() {
		return fmt.Errorf("--cgroup-root %s: not cleaning up pod cgroups: this agent does not hold the cgroup root: %w", m.cfg.CgroupRoot, errdefs.ErrConflict)
	}
	found, err := m.podCgroups()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, pc := range found {
		if keep[pc.uid] {
			continue
		}
		m.log.Info("removing orphaned pod cgroup", "podUID", pc.uid, "cgroup", m.driver.Path(pc.name))
		if err := m.RemovePod(ctx, pc.uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PodCgroups lists the UIDs of the pod cgroups below kubepods, whoever
// made them: a starting agent asks before it takes over a cgroup root
// another agent used (and may still have pods in). None without
// cgroups-per-qos.
func (m *Manager) PodCgroups() ([]types.UID, error) {
	found, err := m.podCgroups()
	uids := make([]types.UID, 0, len(found))
	for _, pc := range found {
		uids = append(uids, pc.uid)
	}
	return uids, err
}

type podCgroup struct {
	uid  types.UID
	name cgroups.Name
}

// podCgroups finds the pod cgroups in kubepods and its QoS tiers.
func (m *Manager) podCgroups() ([]podCgroup, error) {
	if !m.cfg.CgroupsPerQOS {
		return nil, nil
	}
	var found []podCgroup
	var errs []error
	for _, parent := range []cgroups.Name{m.kubepods, m.kubepods.Child(burstableName), m.kubepods.Child(besteffortName)} {
		if !m.driver.Exists(parent) {
			continue
		}
		kids, err := m.driver.Children(parent)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, k := range kids {
			if uid, ok := m.podUIDFromChild(k); ok {
				found = append(found, podCgroup{uid: uid, name: parent.Child(k)})
			}
		}
	}
	return found, errors.Join(errs...)
}

// podUIDFromChild reads a pod UID back from a child cgroup's directory
// name under either naming scheme.
func (m *Manager) podUIDFromChild(dir string) (types.UID, bool) {
	if m.driver.Path(cgroups.Name{"x"}) == "/x" { // cgroupfs naming
		uid, ok := strings.CutPrefix(dir, podPrefix)
		return types.UID(uid), ok && uid != ""
	}
	base, ok := strings.CutSuffix(dir, ".slice")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(base, "-"+podPrefix)
	if i < 0 {
		return "", false
	}
	uid := base[i+1+len(podPrefix):]
	return types.UID(strings.ReplaceAll(uid, "_", "-")), uid != ""
}

// updateTiersLocked writes the burstable tier's shares (the summed cpu
// requests of Burstable pods, at least 2), the besteffort tier's 2 shares,
// and with qos-reserved the tiers' memory limits. Unchanged values are not
// rewritten. A memory limit below current usage is raised to the usage.
func (m *Manager) updateTiersLocked() error {
	var burstCPU, guarMem, burstMem int64
	for _, e := range m.pods {
		switch e.class {
		case v1.PodQOSGuaranteed:
			guarMem += e.memBytes
		case v1.PodQOSBurstable:
			burstCPU += e.cpuMilli
			burstMem += e.memBytes
		}
	}
	want := map[v1.PodQOSClass]tierValues{
		v1.PodQOSBurstable:  {shares: qos.MilliCPUToShares(burstCPU), memory: -1},
		v1.PodQOSBestEffort: {shares: qos.MinShares, memory: -1},
	}
	if pct := m.cfg.QOSReservedMemoryPercent; pct > 0 {
		alloc := m.reservedAllocatable[v1.ResourceMemory]
		b, be := qos.ReservedMemoryLimits(alloc.Value(), guarMem, burstMem, pct)
		want[v1.PodQOSBurstable] = tierValues{shares: want[v1.PodQOSBurstable].shares, memory: max(b, 0)}
		want[v1.PodQOSBestEffort] = tierValues{shares: qos.MinShares, memory: max(be, 0)}
	}
	var errs []error
	for class, tier := range map[v1.PodQOSClass]string{v1.PodQOSBurstable: burstableName, v1.PodQOSBestEffort: besteffortName} {
		w, last := want[class], m.lastTiers[class]
		if _, written := m.lastTiers[class]; written && w == last {
			continue
		}
		name := m.kubepods.Child(tier)
		res := &cgroups.Resources{CPUShares: &w.shares, Memory: &w.memory}
		if err := m.driver.Update(name, res); err != nil {
			// Likely the limit is below what the tier already uses:
			// keep the usage as the limit, as the kubelet does.
			st, serr := m.driver.Stats(name)
			if serr != nil || w.memory < 0 || int64(st.MemoryUsage) <= w.memory {
				errs = append(errs, err)
				continue
			}
			w.memory = int64(st.MemoryUsage)
			if err := m.driver.Update(name, &cgroups.Resources{CPUShares: &w.shares, Memory: &w.memory}); err != nil {
				errs = append(errs, err)
				continue
			}
			m.log.Info("QoS tier memory limit kept at current usage", "tier", tier, "limit", w.memory)
		}
		m.lastTiers[class] = w
	}
	return errors.Join(errs...)
}

// Capacity is the node's capacity, extended resources included (their
// unhealthy devices too).
func (m *Manager) Capacity() v1.ResourceList {
	out := m.capacity.DeepCopy()
	if m.cfg.Extended != nil {
		capacity, _ := m.cfg.Extended.Resources()
		for name, q := range capacity {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// Allocatable is capacity minus kube-reserved, system-reserved and the
// hard eviction thresholds, with the healthy devices of extended
// resources merged in.
func (m *Manager) Allocatable() v1.ResourceList {
	out := m.allocatable.DeepCopy()
	if m.cfg.Extended != nil {
		_, alloc := m.cfg.Extended.Resources()
		for name, q := range alloc {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// admissionAllocatable is Allocatable with every extended resource raised
// to at least what pods hold of it, as the kubelet's resource fit does:
// after an agent restart, before the plugins have registered again, the
// pods that hold devices from the checkpoint still fit.
func (m *Manager) admissionAllocatable() v1.ResourceList {
	out := m.Allocatable()
	if m.cfg.Extended == nil {
		return out
	}
	for name, held := range m.cfg.Extended.InUse() {
		if cur, ok := out[name]; !ok || cur.Cmp(held) < 0 {
			out[name] = held.DeepCopy()
		}
	}
	return out
}

func klogRef(pod *v1.Pod) string {
	if pod.Namespace == "" {
		return pod.Name
	}
	return pod.Namespace + "/" + pod.Name
}
