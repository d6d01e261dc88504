package eviction

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/errdefs"
)

// HostStatsConfig says where HostStats measures.
type HostStatsConfig struct {
	// RootDir is on the node filesystem (nodefs). Required.
	RootDir string
	// ImageFsPath is on the image filesystem (imagefs); "" = RootDir, the
	// kubelet's "no dedicated imagefs" case, where both signals report
	// the same filesystem.
	ImageFsPath string
	// MemoryCgroup is the v1 memory controller's root. Default
	// /sys/fs/cgroup/memory.
	MemoryCgroup string
	// ProcDir default /proc.
	ProcDir string
	// PodUsage measures pods for ranking (e.g. SummaryPodUsage over the
	// cgroup manager's Summary). nil: no pod figures, pods rank by
	// priority alone.
	PodUsage func(ctx context.Context, pods []*v1.Pod) (map[types.UID]PodUsage, error)
}

// HostStats measures the real machine:
//
//   - memory.available is capacity minus the working set, like the
//     kubelet's: capacity is MemTotal from /proc/meminfo, the working
//     set is the root memory cgroup's usage minus its inactive file
//     pages (memory.usage_in_bytes - total_inactive_file), or, where that
//     cannot be read, (MemTotal - MemFree) - Inactive(file) from meminfo;
//   - nodefs.* and imagefs.* are statfs of RootDir and ImageFsPath
//     (bytes available to unprivileged users, free inodes);
//   - pid.available is kernel.pid_max minus the tasks the kernel counts
//     (sysinfo procs).
type HostStats struct {
	cfg HostStatsConfig
}

var _ Stats = (*HostStats)(nil)

// NewHostStats checks the configuration and returns the stats source.
func NewHostStats(cfg HostStatsConfig) (*HostStats, error) {
	if cfg.RootDir == "" {
		return nil, fmt.Errorf("%w: eviction host stats: RootDir is required", errdefs.ErrInvalidArgument)
	}
	if cfg.ImageFsPath == "" {
		cfg.ImageFsPath = cfg.RootDir
	}
	if cfg.MemoryCgroup == "" {
		cfg.MemoryCgroup = "/sys/fs/cgroup/memory"
	}
	if cfg.ProcDir == "" {
		cfg.ProcDir = "/proc"
	}
	return &HostStats{cfg: cfg}, nil
}

// NodeObservations implements Stats. A signal that cannot be measured is
// left out; only a failure to measure anything is an error.
func (h *HostStats) NodeObservations(ctx context.Context) (Observations, error) {
	obs := Observations{}
	var errs []string
	if o, err := h.memory(); err == nil {
		obs[SignalMemoryAvailable] = o
	} else {
		errs = append(errs, err.Error())
	}
	for _, fs := range []struct {
		path          string
		bytes, inodes Signal
	}{
		{h.cfg.RootDir, SignalNodeFsAvailable, SignalNodeFsInodesFree},
		{h.cfg.ImageFsPath, SignalImageFsAvailable, SignalImageFsInodesFree},
	} {
		var st unix.Statfs_t
		if err := unix.Statfs(fs.path, &st); err != nil {
			errs = append(errs, fmt.Sprintf("statfs %s: %v", fs.path, err))
			continue
		}
		bs := int64(st.Bsize) //nolint:unconvert // Bsize's type differs across architectures
		obs[fs.bytes] = Observation{Available: int64(st.Bavail) * bs, Capacity: int64(st.Blocks) * bs}
		if st.Files > 0 { // some filesystems do not count inodes
			obs[fs.inodes] = Observation{Available: int64(st.Ffree), Capacity: int64(st.Files)}
		}
	}
	if o, err := h.pids(); err == nil {
		obs[SignalPIDAvailable] = o
	} else {
		errs = append(errs, err.Error())
	}
	if len(obs) == 0 {
		return nil, fmt.Errorf("%w: no eviction signal could be measured: %s", errdefs.ErrUnavailable, strings.Join(errs, "; "))
	}
	return obs, nil
}

// DedicatedImageFs reports whether ImageFsPath is on another filesystem
// than RootDir.
func (h *HostStats) DedicatedImageFs() bool {
	var a, b unix.Stat_t
	if unix.Stat(h.cfg.RootDir, &a) != nil || unix.Stat(h.cfg.ImageFsPath, &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// PodUsage implements Stats.
func (h *HostStats) PodUsage(ctx context.Context, pods []*v1.Pod) (map[types.UID]PodUsage, error) {
	if h.cfg.PodUsage == nil {
		return nil, nil
	}
	return h.cfg.PodUsage(ctx, pods)
}

func (h *HostStats) memory() (Observation, error) {
	mi, err := readKeyValues(filepath.Join(h.cfg.ProcDir, "meminfo"), ":")
	if err != nil {
		return Observation{}, err
	}
	capacity := mi["MemTotal"] * 1024
	if capacity == 0 {
		return Observation{}, fmt.Errorf("%w: meminfo has no MemTotal", errdefs.ErrUnavailable)
	}
	ws, err := h.rootWorkingSet()
	if err != nil {
		used := capacity - min(capacity, mi["MemFree"]*1024)
		ws = used - min(used, mi["Inactive(file)"]*1024)
	}
	return Observation{Available: max(capacity-ws, 0), Capacity: capacity}, nil
}

// rootWorkingSet reads the root memory cgroup (v1).
func (h *HostStats) rootWorkingSet() (int64, error) {
	b, err := os.ReadFile(filepath.Join(h.cfg.MemoryCgroup, "memory.usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory.usage_in_bytes: %w", err)
	}
	st, err := readKeyValues(filepath.Join(h.cfg.MemoryCgroup, "memory.stat"), " ")
	if err != nil {
		return 0, err
	}
	return usage - min(usage, st["total_inactive_file"]), nil
}

func (h *HostStats) pids() (Observation, error) {
	b, err := os.ReadFile(filepath.Join(h.cfg.ProcDir, "sys/kernel/pid_max"))
	if err != nil {
		return Observation{}, err
	}
	pidMax, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return Observation{}, fmt.Errorf("pid_max: %w", err)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return Observation{}, fmt.Errorf("sysinfo: %w", err)
	}
	return Observation{Available: max(pidMax-int64(si.Procs), 0), Capacity: pidMax}, nil
}

// readKeyValues reads "key<sep> value [unit]" lines into numbers.
func readKeyValues(path, sep string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[strings.TrimSpace(k)] = n
		}
	}
	return out, sc.Err()
}

// SummaryPodUsage measures pods through a Summary API provider (the
// cgroup manager's): working set per pod and container, ephemeral
// storage and process counts where the summary has them.
func SummaryPodUsage(summary func(ctx context.Context, pods []*v1.Pod) (*statsapi.Summary, error)) func(context.Context, []*v1.Pod) (map[types.UID]PodUsage, error) {
	return func(ctx context.Context, pods []*v1.Pod) (map[types.UID]PodUsage, error) {
		s, err := summary(ctx, pods)
		if err != nil {
			return nil, err
		}
		out := make(map[types.UID]PodUsage, len(s.Pods))
		for _, ps := range s.Pods {
			if ps.Memory == nil || ps.Memory.WorkingSetBytes == nil {
				continue // no cgroup figures: unknown usage
			}
			u := PodUsage{Memory: int64(*ps.Memory.WorkingSetBytes), Containers: map[string]int64{}}
			for _, c := range ps.Containers {
				if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
					u.Containers[c.Name] = int64(*c.Memory.WorkingSetBytes)
				}
			}
			if es := ps.EphemeralStorage; es != nil {
				if es.UsedBytes != nil {
					u.Disk = int64(*es.UsedBytes)
				}
				if es.InodesUsed != nil {
					u.Inodes = int64(*es.InodesUsed)
				}
			}
			if ps.ProcessStats != nil && ps.ProcessStats.ProcessCount != nil {
				u.Processes = int64(*ps.ProcessStats.ProcessCount)
			}
			out[types.UID(ps.PodRef.UID)] = u
		}
		return out, nil
	}
}
