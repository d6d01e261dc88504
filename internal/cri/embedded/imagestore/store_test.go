package imagestore

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/cri/embedded/internal/testlayer"
)

func TestLayerDigestMismatchIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (layer files keep their owners); CI runs as root")
	}
	s, err := Open(slog.New(slog.NewTextHandler(t.Output(), nil)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := testlayer.Tar(t, testlayer.File("f", "x", 0o644))
	wrong := "sha256:" + strings.Repeat("0", 64)
	_, err = s.addLayer(wrong, func() (readCloser, error) { return io.NopCloser(bytes.NewReader(l)), nil })
	if err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("addLayer with a wrong diffID = %v", err)
	}
	if entries, _ := os.ReadDir(s.layerDir()); len(entries) != 0 {
		t.Fatalf("a layer with the wrong digest was kept: %v", entries)
	}
	if entries, _ := os.ReadDir(s.TmpDir()); len(entries) != 0 {
		t.Fatalf("temporary files left: %v", entries)
	}
}
