package cm

import (
	"fmt"
	"os"
	"strings"

	"github.com/minilet/minilet/internal/errdefs"
)

// ProcSwaps lists the swap areas in use.
const ProcSwaps = "/proc/swaps"

// CheckSwap is the kubelet's failSwapOn check: an error, with the
// kubelet's words and the swap areas in use, when swaps (a /proc/swaps
// file) lists any. A file that cannot be read is not swap.
func CheckSwap(swaps string) error {
	data, err := os.ReadFile(swaps)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) <= 1 { // the header only
		return nil
	}
	return errdefs.Classify(fmt.Errorf("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false (failSwapOn: false); %s contained: %q",
		swaps, lines[1:]), errdefs.ErrConflict)
}
