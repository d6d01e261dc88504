package bench

// Image benchmarks for the embedded runtime's image store (issue 7):
//
//   - BenchmarkImagePull: pull + unpack of a 3-layer image (~48 MiB
//     unpacked, gzip layers) from an in-process registry on loopback into a
//     fresh store, against BenchmarkImageTarExtract: `tar -xzf` of the same
//     compressed layer blobs. Both report MB/s of unpacked layer content.
//   - BenchmarkRootfsContainerColdStart: CreateContainer + StartContainer
//     of a container from an image already present (static binary, own
//     namespaces, overlay root, /proc /dev /sys) until its process runs;
//     BenchmarkHostContainerColdStart is the same on the host image.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
)

// TestMain lets the embedded runtime re-execute this test binary as its
// container monitor and container init.
func TestMain(m *testing.M) {
	embedded.MaybeRunMonitor()
	os.Exit(m.Run())
}

func imagesBenchLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// imagesBenchLayer is a layer of n files of size bytes each: half random
// (incompressible), half repetitive text, like typical image content.
func imagesBenchLayer(b *testing.B, seed int64, n, size int) []byte {
	b.Helper()
	rng := rand.New(rand.NewSource(seed))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog\n"), size/44+1)[:size]
	data := make([]byte, size)
	for i := 0; i < n; i++ {
		if i%10 == 0 {
			_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/", i/10), Typeflag: tar.TypeDir, Mode: 0o755})
		}
		content := text
		if i%2 == 0 {
			rng.Read(data)
			content = data
		}
		hdr := &tar.Header{Name: fmt.Sprintf("d%d/f%d", i/10, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size), ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			b.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func imagesBenchImage(b *testing.B, cfg v1.Config, layers ...[]byte) v1.Image {
	b.Helper()
	img := empty.Image
	for _, l := range layers {
		data := l
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			b.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			b.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		b.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		b.Fatal(err)
	}
	return img
}

func imagesBenchLayers(b *testing.B) ([][]byte, int64) {
	var layers [][]byte
	var total int64
	for i, spec := range []struct{ n, size int }{{200, 128 << 10}, {100, 128 << 10}, {1000, 4 << 10}} {
		l := imagesBenchLayer(b, int64(i), spec.n, spec.size)
		layers = append(layers, l)
		total += int64(spec.n * spec.size)
	}
	return layers, total
}

func BenchmarkImagePull(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (ownership, overlay whiteouts)")
	}
	layers, total := imagesBenchLayers(b)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/bench/app:v1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	if err := remote.Write(r, imagesBenchImage(b, v1.Config{}, layers...)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		root := b.TempDir()
		rt, err := embedded.New(embedded.Config{RootDir: root, Logger: imagesBenchLogger(), CNIConfDir: b.TempDir(), CNIBinDirs: []string{podnettest.BinDir(b)}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: ref}, nil, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = rt.Close(context.Background())
		_ = os.RemoveAll(root)
		b.StartTimer()
	}
}

func BenchmarkImageTarExtract(b *testing.B) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		b.Skip("no tar binary")
	}
	layers, total := imagesBenchLayers(b)
	img := imagesBenchImage(b, v1.Config{}, layers...)
	ls, err := img.Layers()
	if err != nil {
		b.Fatal(err)
	}
	src := b.TempDir()
	var blobs []string
	for i, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			b.Fatal(err)
		}
		p := filepath.Join(src, fmt.Sprintf("layer%d.tar.gz", i))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
		blobs = append(blobs, p)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := b.TempDir()
		b.StartTimer()
		for j, blob := range blobs {
			d := filepath.Join(dst, fmt.Sprint(j))
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
			if out, err := exec.Command(tarBin, "-xzf", blob, "-C", d).CombinedOutput(); err != nil {
				b.Fatalf("tar: %v %s", err, out)
			}
		}
		b.StopTimer()
		_ = os.RemoveAll(dst)
		b.StartTimer()
	}
}

// imagesBenchProbe builds the embedded runtime's static test program.
func imagesBenchProbe(b *testing.B) []byte {
	b.Helper()
	out := filepath.Join(b.TempDir(), "probe")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join("..", "internal", "cri", "embedded", "testdata", "probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("cannot build the probe binary: %v %s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func BenchmarkRootfsContainerColdStart(b *testing.B) {
	benchColdStart(b, false)
}

func BenchmarkHostContainerColdStart(b *testing.B) {
	benchColdStart(b, true)
}

func benchColdStart(b *testing.B, host bool) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (namespaces, mounts, cgroups)")
	}
	ctx := context.Background()
	rt, err := embedded.New(embedded.Config{RootDir: b.TempDir(), Logger: imagesBenchLogger(), CNIConfDir: b.TempDir(), CNIBinDirs: []string{podnettest.BinDir(b)}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rt.Close(ctx) }()
	image, cmd := "host", []string{"/bin/true"}
	if !host {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		bin := imagesBenchProbe(b)
		_ = tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: "bin/probe", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
		_, _ = tw.Write(bin)
		_ = tw.Close()
		img := imagesBenchImage(b, v1.Config{Entrypoint: []string{"/bin/probe"}}, buf.Bytes())
		tag, _ := name.NewTag("bench.example/probe:1")
		var archive bytes.Buffer
		if err := tarball.Write(tag, img, &archive); err != nil {
			b.Fatal(err)
		}
		if _, err := rt.LoadArchive(ctx, &archive); err != nil {
			b.Fatal(err)
		}
		image, cmd = "bench.example/probe:1", []string{"/bin/probe", "echo", "hi"}
	}
	parent := fmt.Sprintf("/minilet-bench-images-%d-%d", os.Getpid(), time.Now().UnixNano())
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "bench", Namespace: "bench", Uid: "bench-uid"},
		LogDirectory: b.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
	}, "")
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = rt.RemovePodSandbox(ctx, sb)
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		id, err := rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", i)},
			Image:    &runtimeapi.ImageSpec{Image: image}, Command: cmd, LogPath: fmt.Sprintf("c%d.log", i),
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.StartContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err := rt.RemoveContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)-1)*99/100].Microseconds())/1000, "p99-ms")
}
