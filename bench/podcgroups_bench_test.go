package bench

// Pod cgroup benchmarks: setup (cm.Manager.EnsurePod: QoS tier update plus
// the pod cgroup in every v1 hierarchy with its values) and teardown
// (RemovePod: kill check, rmdir, tier update) of 110 pods of mixed QoS on
// the machine's real cgroup v1 hierarchies, under a private --cgroup-root.
// Reports per-pod p50/p99 latency and control-file writes per pod.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/cm/cgroups"
)

const podCgroupsBenchPods = 110

// podCgroupsBenchPod returns pod i: Guaranteed, Burstable and BestEffort in turn.
func podCgroupsBenchPod(i int) *v1.Pod {
	q := resource.MustParse
	var res v1.ResourceRequirements
	switch i % 3 {
	case 0:
		res = v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("10m"), v1.ResourceMemory: q("16Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("10m"), v1.ResourceMemory: q("16Mi")},
		}
	case 1:
		res = v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("5m"), v1.ResourceMemory: q("8Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("50m"), v1.ResourceMemory: q("64Mi")},
		}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("bench-uid-%d", i))},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: res}}},
	}
}

func podCgroupsBenchPercentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func BenchmarkPodCgroups(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for real cgroups")
	}
	if mode, err := cgroups.Detect(cgroups.DefaultMountRoot); err != nil || mode != cgroups.ModeV1 {
		b.Skipf("needs cgroup v1 (detected %v, %v)", mode, err)
	}
	for _, qosReserved := range []int64{0, 50} {
		b.Run(fmt.Sprintf("qos-reserved=%d%%", qosReserved), func(b *testing.B) {
			root := fmt.Sprintf("/minilet-bench-%d-%d", os.Getpid(), qosReserved)
			m, err := cm.New(cm.Config{
				CgroupRoot: root, CgroupsPerQOS: true, RootDir: b.TempDir(), QOSReservedMemoryPercent: qosReserved,
				PodPidsLimit: 1024, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.Cleanup(func() {
				name, _ := cgroups.ParseCgroupfs(root)
				if err := m.Driver().Destroy(ctx, name); err != nil {
					b.Errorf("cleanup: %v", err)
				}
			})
			if err := m.Start(ctx); err != nil {
				b.Fatal(err)
			}
			pods := make([]*v1.Pod, podCgroupsBenchPods)
			for i := range pods {
				pods[i] = podCgroupsBenchPod(i)
			}
			var setup, teardown []time.Duration
			var writes uint64
			b.ResetTimer()
			for range b.N {
				w0 := m.Driver().Writes()
				for _, p := range pods {
					t0 := time.Now()
					if err := m.EnsurePod(p); err != nil {
						b.Fatal(err)
					}
					setup = append(setup, time.Since(t0))
				}
				writes += m.Driver().Writes() - w0
				for _, p := range pods {
					t0 := time.Now()
					if err := m.RemovePod(ctx, p.UID); err != nil {
						b.Fatal(err)
					}
					teardown = append(teardown, time.Since(t0))
				}
			}
			b.StopTimer()
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(us(podCgroupsBenchPercentile(setup, 0.50)), "setup-p50-µs")
			b.ReportMetric(us(podCgroupsBenchPercentile(setup, 0.99)), "setup-p99-µs")
			b.ReportMetric(us(podCgroupsBenchPercentile(teardown, 0.50)), "teardown-p50-µs")
			b.ReportMetric(us(podCgroupsBenchPercentile(teardown, 0.99)), "teardown-p99-µs")
			b.ReportMetric(float64(writes)/float64(b.N*podCgroupsBenchPods), "writes/pod-setup")
		})
	}
}
