// Command minilet-monitor is the small per-container monitor of minilet's
// embedded runtime. The agent starts one per container (argv[0]
// "minilet-monitor", the container's state directory in the environment);
// it also serves as the container init of containers from images. It links
// only the standard library, golang.org/x/sys and minilet packages that
// themselves use nothing else (the cgroup driver, atomic file writes, state
// files, error classes; a test guards this), so each monitor starts in
// a few milliseconds and keeps little private memory, unlike a re-exec of
// the whole agent binary, which the runtime falls back to when this binary
// is not installed next to the agent.
package main

import (
	"fmt"
	"os"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

func main() {
	monitorproc.MaybeRun()
	fmt.Fprintln(os.Stderr, "minilet-monitor: this program is started by the minilet agent, one per container; it is not run by hand")
	os.Exit(2)
}
