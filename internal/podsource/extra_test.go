package podsource

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The manifests shipped in examples/pods must stay valid.
func TestExamplesAreValid(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "pods")
	var sink errSink
	s, err := NewFile(FileConfig{NodeName: node, Path: dir, Logger: testLogger(t), OnError: sink.on})
	if err != nil {
		t.Fatal(err)
	}
	s.Step()
	u := <-s.Updates()
	if got := names(u.Pods); got != "job-node1,web-node1,writer-node1" {
		t.Fatalf("examples gave pods [%s]; errors: %v", got, sink.errs)
	}
}

// Removing the watched directory empties the set; recreating it is noticed
// by the periodic re-read.
func TestFileSourceDirectoryRemovedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), podYAML("a", "sleep 60"))
	s := startFile(t, FileConfig{Path: dir, Period: 100 * time.Millisecond})
	waitNames(t, s.Updates(), "a-node1")

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitNames(t, s.Updates(), "")

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "b.yaml"), podYAML("b", "sleep 60"))
	waitNames(t, s.Updates(), "b-node1")
	// The watch is back: a new file shows up (the re-read would find it too).
	write(t, filepath.Join(dir, "c.yaml"), podYAML("c", "sleep 60"))
	waitNames(t, s.Updates(), "b-node1,c-node1")
}

func BenchmarkParseManifest(b *testing.B) {
	data := []byte(podYAML("bench", "sleep 60"))
	now := time.Now()
	for b.Loop() {
		if _, err := ParseManifest(data, "/etc/pods/bench.yaml", "file", node, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileSourceStep is one full re-read of 100 unchanged manifests.
func BenchmarkFileSourceStep(b *testing.B) {
	dir := b.TempDir()
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%03d.yaml", i)), []byte(podYAML(fmt.Sprintf("p%03d", i), "sleep 60")), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, err := NewFile(FileConfig{NodeName: node, Path: dir})
	if err != nil {
		b.Fatal(err)
	}
	s.Step()
	var u Update
	select {
	case u = <-s.Updates():
	default:
	}
	if len(u.Pods) != 100 {
		b.Fatalf("got %d pods", len(u.Pods))
	}
	for b.Loop() {
		s.Step()
	}
}
