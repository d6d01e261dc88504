package bench

// Pod volumes (issue 16), in cluster mode against a real kube-apiserver
// (skipped unless MINILET_CLUSTER=1):
//
//   - startup with and without the kube-api-access volume: pods created
//     one after another alternating between the two (the default
//     service-account token, CA and namespace, which every cluster pod
//     gets, or automountServiceAccountToken false), each created → Running
//     in its API status as seen through a watch; N pairs is
//     MINILET_VOLUME_PODS (default 30). The difference is what the volume
//     costs: a TokenRequest, a ConfigMap read, a tmpfs and the files.
//   - ConfigMap update → visible: a running pod mounts a ConfigMap; the
//     benchmark updates it and polls the file in the pod's volume (the
//     inode the container reads through its bind mount) every 10 ms. With
//     the kubelet's default syncFrequency (1m) the content moves at the
//     pod's next periodic sync, as the kubelet's does; N updates is
//     MINILET_CONFIGMAP_UPDATES (default 6).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
)

func BenchmarkClusterPodStartVolumes(b *testing.B) {
	requireRootB(b)
	clustertest.SkipUnlessEnabled(b)
	n := envInt("MINILET_VOLUME_PODS", 30)
	srv, a := clusterAgent(b, "vols", clustertest.Options{})
	ctx := context.Background()
	pods := srv.Admin.CoreV1().Pods("default")
	w := nodePodWatch(b, srv, a.NodeName)
	lat := map[bool][]time.Duration{}
	b.ResetTimer()
	for i := range 2 * n {
		withToken := i%2 == 0
		name := fmt.Sprintf("v%03d", i)
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{
				NodeName: a.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers: []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1000"}}},
			},
		}
		if !withToken {
			p.Spec.AutomountServiceAccountToken = ptr.To(false)
		}
		start := time.Now()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitWatch(b, w, name, func(_ watch.Event, p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
		lat[withToken] = append(lat[withToken], time.Since(start))
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		waitWatch(b, w, name, func(e watch.Event, _ *v1.Pod) bool { return e.Type == watch.Deleted })
	}
	b.StopTimer()
	for _, tok := range []bool{false, true} {
		label := map[bool]string{false: "no-volume", true: "kube-api-access"}[tok]
		l := lat[tok]
		b.ReportMetric(ms(percentile(l, 0.5)), label+"-p50-ms")
		b.ReportMetric(ms(percentile(l, 0.99)), label+"-p99-ms")
		b.Logf("%s: n=%d p50=%.0fms p99=%.0fms max=%.0fms", label, len(l), ms(percentile(l, 0.5)), ms(percentile(l, 0.99)), ms(slices.Max(l)))
	}
	b.Logf("load %s", loadavg())
}

func BenchmarkClusterConfigMapUpdate(b *testing.B) {
	requireRootB(b)
	clustertest.SkipUnlessEnabled(b)
	n := envInt("MINILET_CONFIGMAP_UPDATES", 6)
	srv, a := clusterAgent(b, "cmupd", clustertest.Options{})
	ctx := context.Background()
	cms := srv.Admin.CoreV1().ConfigMaps("default")
	cm, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "live"}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := srv.Admin.CoreV1().Pods("default").Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Spec: v1.PodSpec{
			NodeName: a.NodeName,
			Volumes:  []v1.Volume{{Name: "live", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "live"}}}}},
			Containers: []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1000"},
				VolumeMounts: []v1.VolumeMount{{Name: "live", MountPath: "/etc/live"}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(a.RootDir, "pods", string(p.UID), "volumes", "kubernetes.io~configmap", "live", "v")
	waitFile := func(want string, limit time.Duration) {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			if got, err := os.ReadFile(file); err == nil && string(got) == want {
				return
			}
			time.Sleep(10 * time.Millisecond) // the sampling interval of the measurement
		}
		b.Fatalf("%s did not become %q within %s", file, want, limit)
	}
	waitFile("0", time.Minute)
	var lat []time.Duration
	b.ResetTimer()
	for i := 1; i <= n; i++ {
		cm.Data["v"] = strconv.Itoa(i)
		start := time.Now()
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitFile(strconv.Itoa(i), 3*time.Minute)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.Logf("configMap update → visible: n=%d p50=%.0fms p99=%.0fms max=%.0fms (syncFrequency 1m); load %s",
		n, ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(slices.Max(lat)), loadavg())
}
