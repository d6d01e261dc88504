package cm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/qos"
)

// userHZ is the kernel's clock tick for /proc/stat (USER_HZ, 100 on Linux).
const userHZ = 100

// statsCache remembers the previous cumulative CPU sample per cgroup (and
// for the node) to turn counters into a usageNanoCores rate.
type statsCache struct {
	mu   sync.Mutex
	prev map[string]cpuSample
	seen map[string]bool
}

type cpuSample struct {
	usage uint64
	at    time.Time
}

// rate records the sample and returns the rate since the previous one
// (nil for the first sample or a counter reset).
func (c *statsCache) rate(key string, usage uint64, at time.Time) *uint64 {
	if c.prev == nil {
		c.prev = map[string]cpuSample{}
	}
	if c.seen != nil {
		c.seen[key] = true
	}
	p, ok := c.prev[key]
	c.prev[key] = cpuSample{usage: usage, at: at}
	if !ok || usage < p.usage || !at.After(p.at) {
		return nil
	}
	r := uint64(float64(usage-p.usage) / float64(at.Sub(p.at).Nanoseconds()) * 1e9)
	return &r
}

// Summary returns the kubelet Summary API: the node's cpu and memory from
// /proc, its filesystem and pid usage, the "pods" system container
// (kubepods), and for each pod its cgroup's cpu, memory and process count
// plus its running containers (from pod.Status.ContainerStatuses; the
// container cgroup is <pod cgroup>/<container ID>). usageNanoCores is the
// rate since the previous Summary call, absent on the first.
func (m *Manager) Summary(ctx context.Context, pods []*v1.Pod) (*statsapi.Summary, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := m.clk.Now()
	ts := metav1.NewTime(now)
	m.stats.mu.Lock()
	defer m.stats.mu.Unlock()
	m.stats.seen = map[string]bool{}
	defer func() {
		for k := range m.stats.prev {
			if !m.stats.seen[k] {
				delete(m.stats.prev, k)
			}
		}
		m.stats.seen = nil
	}()

	node, err := m.nodeStats(ts)
	if err != nil {
		return nil, err
	}
	if m.cfg.CgroupsPerQOS {
		if st, err := m.driver.Stats(m.kubepods); err == nil {
			cs := statsapi.ContainerStats{Name: statsapi.SystemContainerPods, StartTime: node.StartTime}
			cs.CPU, cs.Memory = m.cgroupCPUMem("pods", st, ts)
			node.SystemContainers = append(node.SystemContainers, cs)
		}
	}
	out := &statsapi.Summary{Node: *node, Pods: make([]statsapi.PodStats, 0, len(pods))}
	for _, pod := range pods {
		out.Pods = append(out.Pods, m.podStats(pod, ts))
	}
	return out, nil
}

func (m *Manager) podStats(pod *v1.Pod, ts metav1.Time) statsapi.PodStats {
	ps := statsapi.PodStats{
		PodRef:     statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
		Containers: []statsapi.ContainerStats{},
	}
	if pod.Status.StartTime != nil {
		ps.StartTime = *pod.Status.StartTime
	}
	if !m.cfg.CgroupsPerQOS {
		return ps
	}
	name := m.podName(qos.PodQOSClass(pod), pod.UID)
	m.mu.Lock()
	if e, ok := m.pods[pod.UID]; ok {
		name = e.name
	}
	m.mu.Unlock()
	st, err := m.driver.Stats(name)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("reading pod cgroup stats", "pod", klogRef(pod), "err", err)
		}
		return ps
	}
	ps.CPU, ps.Memory = m.cgroupCPUMem("pod/"+string(pod.UID), st, ts)
	if pids, err := m.driver.Pids(name); err == nil {
		procs := uint64(len(pids))
		ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: &procs}
	}
	for _, cst := range pod.Status.ContainerStatuses {
		if cst.State.Running == nil || cst.ContainerID == "" {
			continue
		}
		id := cst.ContainerID
		if _, after, ok := strings.Cut(id, "://"); ok {
			id = after
		}
		cs, err := m.driver.Stats(name.Child(id))
		if err != nil {
			continue
		}
		c := statsapi.ContainerStats{Name: cst.Name, StartTime: cst.State.Running.StartedAt}
		c.CPU, c.Memory = m.cgroupCPUMem("ctr/"+id, cs, ts)
		ps.Containers = append(ps.Containers, c)
	}
	return ps
}

// cgroupCPUMem converts driver stats into Summary API cpu and memory.
func (m *Manager) cgroupCPUMem(key string, st *cgroups.Stats, ts metav1.Time) (*statsapi.CPUStats, *statsapi.MemoryStats) {
	usage := st.CPUUsageNanos
	cpu := &statsapi.CPUStats{Time: ts, UsageCoreNanoSeconds: &usage, UsageNanoCores: m.stats.rate(key, usage, ts.Time)}
	memUsage, ws, rss, pf, mpf := st.MemoryUsage, st.MemoryWorkingSet, st.MemoryRSS, st.PageFaults, st.MajorPageFaults
	mem := &statsapi.MemoryStats{Time: ts, UsageBytes: &memUsage, WorkingSetBytes: &ws, RSSBytes: &rss, PageFaults: &pf, MajorPageFaults: &mpf}
	if st.MemoryLimit > 0 {
		avail := st.MemoryLimit - min(st.MemoryLimit, ws)
		mem.AvailableBytes = &avail
	}
	return cpu, mem
}

// nodeStats reads the machine: /proc/stat, /proc/meminfo, /proc/vmstat,
// the root dir's filesystem and the pid limits.
func (m *Manager) nodeStats(ts metav1.Time) (*statsapi.NodeStats, error) {
	ns := &statsapi.NodeStats{NodeName: m.cfg.NodeName}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("node stats: %w", err)
	}
	for _, line := range strings.Split(string(stat), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 8 && f[0] == "cpu":
			var busy uint64
			for i, v := range f[1:9] {
				if i == 3 || i == 4 { // idle, iowait
					continue
				}
				n, _ := strconv.ParseUint(v, 10, 64)
				busy += n
			}
			usage := busy * (1e9 / userHZ)
			ns.CPU = &statsapi.CPUStats{Time: ts, UsageCoreNanoSeconds: &usage, UsageNanoCores: m.stats.rate("node", usage, ts.Time)}
		case len(f) == 2 && f[0] == "btime":
			if s, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				ns.StartTime = metav1.NewTime(time.Unix(s, 0))
			}
		}
	}
	mi, err := readMeminfo()
	if err != nil {
		return nil, err
	}
	total, free := mi["MemTotal"], mi["MemFree"]
	usage := total - min(total, free)
	ws := usage - min(usage, mi["Inactive(file)"])
	avail := total - ws
	rss := mi["AnonPages"]
	mem := &statsapi.MemoryStats{Time: ts, AvailableBytes: &avail, UsageBytes: &usage, WorkingSetBytes: &ws, RSSBytes: &rss}
	if vm, err := os.ReadFile("/proc/vmstat"); err == nil {
		for _, line := range strings.Split(string(vm), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "pgfault":
				mem.PageFaults = &n
			case "pgmajfault":
				mem.MajorPageFaults = &n
			}
		}
	}
	ns.Memory = mem

	var fs unix.Statfs_t
	if err := unix.Statfs(m.cfg.RootDir, &fs); err == nil {
		capacity := fs.Blocks * uint64(fs.Bsize)
		available := fs.Bavail * uint64(fs.Bsize)
		used := (fs.Blocks - fs.Bfree) * uint64(fs.Bsize)
		inodes, inodesFree := fs.Files, fs.Ffree
		inodesUsed := inodes - inodesFree
		ns.Fs = &statsapi.FsStats{Time: ts, CapacityBytes: &capacity, AvailableBytes: &available, UsedBytes: &used,
			Inodes: &inodes, InodesFree: &inodesFree, InodesUsed: &inodesUsed}
	}
	ns.Rlimit = pidStats(ts)
	return ns, nil
}

// pidStats reads the pid limit and the number of tasks on the node.
func pidStats(ts metav1.Time) *statsapi.RlimitStats {
	r := &statsapi.RlimitStats{Time: ts}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			r.MaxPID = &n
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		// "0.00 0.01 0.05 1/123 456": the 4th field is running/total tasks.
		if f := strings.Fields(string(b)); len(f) >= 4 {
			if _, total, ok := strings.Cut(f[3], "/"); ok {
				if n, err := strconv.ParseInt(total, 10, 64); err == nil {
					r.NumOfRunningProcesses = &n
				}
			}
		}
	}
	return r
}
