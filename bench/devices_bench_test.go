package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/devicemanager"
)

// benchPlugin is a minimal device plugin answering instantly, so the
// figures are the agent's cost plus one gRPC round trip.
type benchPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devs  []*pluginapi.Device
	storm time.Duration // when set, resend the list this often, flipping the last device's health
}

func (p *benchPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *benchPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devs}); err != nil {
		return err
	}
	if p.storm == 0 {
		<-s.Context().Done()
		return nil
	}
	t := time.NewTicker(p.storm)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.Context().Done():
			return nil
		case <-t.C:
		}
		devs := append([]*pluginapi.Device(nil), p.devs...)
		health := pluginapi.Healthy
		if i%2 == 0 {
			health = pluginapi.Unhealthy
		}
		last := devs[len(devs)-1]
		devs[len(devs)-1] = &pluginapi.Device{ID: last.ID, Health: health}
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
	}
}

func (p *benchPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"BENCH": "1"},
		})
	}
	return resp, nil
}

// BenchmarkDeviceAllocate measures Manager.Allocate for a pod asking for
// one device out of N, over real gRPC on unix sockets (p50/p99, µs), and
// the same followed by RunOptions, which waits until the checkpoint is on
// disk (durable-p50/p99: the cost before the container may start).
func BenchmarkDeviceAllocate(b *testing.B) {
	for _, n := range []int{64, 1000} {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) { benchAllocate(b, n, 0) })
	}
	// A ListAndWatch storm of ~1,000 updates/s while allocating.
	b.Run("devices=1000/storm=1ms", func(b *testing.B) { benchAllocate(b, 1000, time.Millisecond) })
}

func benchAllocate(b *testing.B, n int, storm time.Duration) {
	dir, err := os.MkdirTemp("", "dpb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	const resName = "bench.example.com/dev"

	m, err := devicemanager.New(devicemanager.Config{PluginDir: dir}, nil, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer m.Stop()

	p := &benchPlugin{storm: storm}
	for i := range n {
		p.devs = append(p.devs, &pluginapi.Device{ID: fmt.Sprintf("dev-%04d", i), Health: pluginapi.Healthy})
	}
	lis, err := net.Listen("unix", filepath.Join(dir, "bench.sock"))
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, devicemanager.KubeletSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: "bench.sock", ResourceName: resName,
	}, grpc.WaitForReady(true)); err != nil {
		b.Fatal(err)
	}
	_ = conn.Close()
	for {
		_, a, _ := m.Capacity()
		if q := a[resName]; q.Value() >= int64(n-1) {
			break
		}
		if ctx.Err() != nil {
			b.Fatal("plugin devices never showed up")
		}
		time.Sleep(time.Millisecond)
	}

	lat := make([]time.Duration, 0, b.N)     // Allocate (admission)
	durable := make([]time.Duration, 0, b.N) // Allocate + RunOptions (waits for the checkpoint on disk)
	b.ResetTimer()
	for i := range b.N {
		uid := types.UID(fmt.Sprintf("pod-%d", i))
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "bench", UID: uid}}
		pod.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{resName: *resource.NewQuantity(1, resource.DecimalSI)},
		}}}
		start := time.Now()
		if err := m.Allocate(context.Background(), pod); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if _, err := m.RunOptions(pod, &pod.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
		durable = append(durable, time.Since(start))
		b.StopTimer()
		m.RemovePod(uid)
		b.StartTimer()
	}
	b.StopTimer()
	pct := func(d []time.Duration, q float64) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(lat, 0.50), "p50-µs")
	b.ReportMetric(pct(lat, 0.99), "p99-µs")
	b.ReportMetric(pct(durable, 0.50), "durable-p50-µs")
	b.ReportMetric(pct(durable, 0.99), "durable-p99-µs")
}
