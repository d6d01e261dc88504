package cm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
)

// failSwapOn's check: swap in use is the kubelet's error, naming the
// flag and the swap areas; none in use (the header alone) is no error.
func TestCheckSwap(t *testing.T) {
	dir := t.TempDir()
	off := filepath.Join(dir, "off")
	on := filepath.Join(dir, "on")
	const header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	if err := os.WriteFile(off, []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(on, []byte(header+"/swapfile                               file\t\t1048572\t\t0\t\t-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckSwap(off); err != nil {
		t.Errorf("no swap: %v", err)
	}
	err := CheckSwap(on)
	if err == nil || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("swap on: %v, want an error", err)
	}
	for _, want := range []string{"running with swap on is not supported", "--fail-swap-on", "/swapfile"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := CheckSwap(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("unreadable swaps file: %v", err)
	}
}
