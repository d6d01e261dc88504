package cm

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/minilet/minilet/internal/errdefs"
)

// Eviction signals that reduce allocatable.
const (
	signalMemoryAvailable = "memory.available"
	signalNodeFsAvailable = "nodefs.available"
)

// machineCapacity measures the node: cpu count, memory from
// /proc/meminfo, the pod limit and the root dir's filesystem size.
func machineCapacity(rootDir string, maxPods int64) (v1.ResourceList, error) {
	mi, err := readMeminfo()
	if err != nil {
		return nil, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(rootDir, &fs); err != nil {
		return nil, fmt.Errorf("rootDir %s: statfs: %w", rootDir, err)
	}
	return v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(int64(mi["MemTotal"]), resource.BinarySI),
		v1.ResourcePods:             *resource.NewQuantity(maxPods, resource.DecimalSI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(fs.Blocks)*fs.Bsize, resource.BinarySI),
	}, nil
}

// readMeminfo returns /proc/meminfo in bytes.
func readMeminfo() (map[string]uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, fmt.Errorf("read machine memory: %w", err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/meminfo: %w", err)
	}
	if out["MemTotal"] == 0 {
		return nil, fmt.Errorf("/proc/meminfo has no MemTotal: %w", errdefs.ErrUnavailable)
	}
	return out, nil
}

// subtractReserved returns capacity minus the given reservations, floored at
// zero, for every resource of capacity.
func subtractReserved(capacity v1.ResourceList, reserved ...v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name, q := range capacity {
		v := q.DeepCopy()
		for _, r := range reserved {
			if rq, ok := r[name]; ok {
				v.Sub(rq)
			}
		}
		if v.Sign() < 0 {
			v = *resource.NewQuantity(0, q.Format)
		}
		out[name] = v
	}
	return out
}

// hardEvictionReserve turns the memory.available and nodefs.available hard
// thresholds into amounts of memory and ephemeral-storage to hold back.
func hardEvictionReserve(thresholds map[string]string, capacity v1.ResourceList) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for signal, res := range map[string]v1.ResourceName{
		signalMemoryAvailable: v1.ResourceMemory,
		signalNodeFsAvailable: v1.ResourceEphemeralStorage,
	} {
		raw, ok := thresholds[signal]
		if !ok {
			continue
		}
		q, err := thresholdQuantity(raw, capacity[res])
		if err != nil {
			return nil, fmt.Errorf("evictionHard[%s] %q: %w", signal, raw, err)
		}
		out[res] = q
	}
	return out, nil
}

// thresholdQuantity parses "100Mi" or "10%" (of capacity).
func thresholdQuantity(raw string, capacity resource.Quantity) (resource.Quantity, error) {
	raw = strings.TrimSpace(raw)
	if s, ok := strings.CutSuffix(raw, "%"); ok {
		pct, err := strconv.ParseFloat(s, 64)
		if err != nil || pct < 0 || pct > 100 {
			return resource.Quantity{}, fmt.Errorf("percentage must be within 0%%..100%%: %w", errdefs.ErrInvalidArgument)
		}
		return *resource.NewQuantity(int64(float64(capacity.Value())*pct/100), resource.BinarySI), nil
	}
	q, err := resource.ParseQuantity(raw)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	if q.Sign() < 0 {
		return resource.Quantity{}, fmt.Errorf("must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	return q, nil
}
