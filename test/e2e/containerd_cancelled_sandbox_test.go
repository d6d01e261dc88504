package e2e

// One RunPodSandbox cut short by the agent's end: the agent is stopped
// (TERM) or killed (KILL) the moment containerd has started the pod's
// shim, before the sandbox exists. containerd 1.6 leaves such a shim
// running with no sandbox when the call is cancelled. A stopped agent
// must let the call finish; a killed one must end the orphan when it
// comes back.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/test/harness"
)

// newShimDaemon waits for a shim daemon of the containerd at socket whose
// id was not in before, and returns its id. A shim comes up in two steps:
// containerd runs "containerd-shim-runc-v2 ... start", which starts the
// daemon (the same command line without "start") and tells containerd
// its address; the sandbox exists only after that. Ending the agent once
// the daemon runs cuts RunPodSandbox short where containerd 1.6 loses
// track of the daemon. It polls /proc without pause: the window is short.
func newShimDaemon(t *testing.T, socket string, before map[string]int) string {
	t.Helper()
	deadline := time.Now().Add(harness.Deadline)
	for time.Now().Before(deadline) {
		for id, pid := range shimIDs(socket) {
			if _, ok := before[id]; ok {
				continue
			}
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err == nil && !bytes.HasSuffix(cmd, []byte("\x00start\x00")) {
				return id
			}
		}
	}
	t.Fatalf("no new containerd shim within %s", harness.Deadline)
	return ""
}

func TestContainerdAgentEndDuringRunPodSandboxLeavesNoOrphanShim(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(a *harness.Agent)
	}{
		{"stopped", (*harness.Agent).Stop},
		{"killed", (*harness.Agent).Kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := containerdAgent(t)
			rt := criClient(t)
			ctx := context.Background()
			socket := strings.TrimPrefix(harness.ContainerdEndpoint(t), "unix://")

			before := shimIDs(socket)
			a.WriteManifest("cut.yaml", stormPod("cut"))
			id := newShimDaemon(t, socket, before)
			tc.end(a)
			t.Logf("agent %s as shim %s started", tc.name, id)

			if tc.name == "stopped" {
				// Nothing to clean up: the sandbox was finished, and its
				// shim belongs to it.
				orphans, err := orphanShims(ctx, rt, socket)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range orphans {
					if strings.HasPrefix(o, id+" ") {
						t.Fatalf("the agent stopped during RunPodSandbox; shim %s has no sandbox", o)
					}
				}
			}
			// Back again: the pod runs, and no shim is without its sandbox.
			a.Start()
			a.Eventually("the pod running, no orphan shim", func() (bool, string) {
				p, ok := a.Pod(a.Static("cut"))
				if s, _ := containerStatus(p, "main"); !ok || s.State.Running == nil {
					return false, "pod cut not running"
				}
				orphans, err := orphanShims(ctx, rt, socket)
				if err != nil {
					return false, err.Error()
				}
				for _, o := range orphans {
					if strings.HasPrefix(o, id+" ") {
						return false, "orphan shim " + o
					}
				}
				return true, ""
			})
		})
	}
}
