package e2e

// A restart storm on containerd: the agent stopped (TERM) or killed
// (KILL) again and again while its pods run and are being deleted. No
// containerd shim may be left without its sandbox (a shim containerd no
// longer knows runs forever), and pods deleted while the agent was down
// are stopped once it returns.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/cri/remote/shimtest"
	"github.com/minilet/minilet/test/harness"
)

// stormPod is a pod on the host network (no CNI: the storm stays quick)
// whose container ignores nothing: it ends at once on TERM.
func stormPod(name string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["/bin/sleep", "3600"]}
`, name, harness.BusyboxImage)
}

// shimIDs are the -id arguments of the live containerd shims serving the
// containerd at socket (their command lines name its address).
func shimIDs(socket string) map[string]int {
	out := map[string]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte("containerd-shim")) || !bytes.Contains(cmd, []byte(socket)) {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-id" {
				out[args[i+1]] = pid
			}
		}
	}
	return out
}

// orphanShims lists the shims of the containerd at socket whose id is no
// sandbox (or container) containerd lists.
func orphanShims(ctx context.Context, rt *remote.Runtime, socket string) ([]string, error) {
	sbs, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, err
	}
	cs, err := rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, sb := range sbs {
		known[sb.Id] = true
	}
	for _, c := range cs {
		known[c.Id] = true
	}
	var orphans []string
	for id, pid := range shimIDs(socket) {
		if !known[id] {
			orphans = append(orphans, fmt.Sprintf("%s (pid %d)", id, pid))
		}
	}
	sort.Strings(orphans)
	return orphans, nil
}

// runningOf reports what of the named pod still runs on containerd: its
// ready sandboxes and running containers.
func runningOf(ctx context.Context, rt *remote.Runtime, name string) (int, error) {
	n := 0
	sbs, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return 0, err
	}
	for _, sb := range sbs {
		if sb.GetMetadata().GetName() == name && sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			n++
		}
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return 0, err
	}
	for _, c := range cs {
		if c.Labels["io.kubernetes.pod.name"] == name {
			n++
		}
	}
	return n, nil
}

// Opt-in (MINILET_E2E_STORM=1): it takes more than a minute. Besides
// what the storm may leave, an orphaned shim of this containerd is
// planted (as containerd 1.6 leaves one when RunPodSandbox is cancelled
// after the shim started): the agent must end it, and must leave alone
// the orphaned shim of a second, private containerd.
func TestContainerdRestartStormLeavesNoOrphanShim(t *testing.T) {
	if os.Getenv("MINILET_E2E_STORM") == "" {
		t.Skip("takes more than a minute: MINILET_E2E_STORM=1")
	}
	a := containerdAgent(t)
	rt := criClient(t)
	ctx := context.Background()
	socket := strings.TrimPrefix(harness.ContainerdEndpoint(t), "unix://")
	planted := shimtest.StartOrphan(t, socket, remote.ShimNamespace)
	foreign := shimtest.StartOrphan(t, filepath.Join(t.TempDir(), "containerd.sock"), remote.ShimNamespace)

	const rounds = 10
	live := map[string]bool{}
	var order []string // live pods, oldest first
	next := 0
	add := func() {
		name := fmt.Sprintf("storm%d", next)
		next++
		a.WriteManifest(name+".yaml", stormPod(name))
		live[name] = true
		order = append(order, name)
	}
	remove := func() string { // the oldest: it has started
		name := order[0]
		order = order[1:]
		a.RemoveManifest(name + ".yaml")
		delete(live, name)
		return name
	}
	for range 3 {
		add()
	}
	// The shims are seen: each running pod's sandbox has one.
	a.Eventually("the first pods running, each sandbox with its shim", func() (bool, string) {
		shims := shimIDs(socket)
		sbs, err := rt.ListPodSandbox(ctx, nil)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, sb := range sbs {
			if live[strings.TrimSuffix(sb.GetMetadata().GetName(), "-"+a.NodeName)] && sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				if _, ok := shims[sb.Id]; !ok {
					return false, "no shim for sandbox " + sb.Id
				}
				n++
			}
		}
		return n == len(live), fmt.Sprintf("%d of %d sandboxes ready with shims %v", n, len(live), shims)
	})
	var deletedWhileDown []string
	var deleted []string
	for i := range rounds {
		// A pod deleted just before the agent goes: its stop, if begun,
		// is cut short by the agent's end.
		add()
		deleted = append(deleted, remove())
		if i%2 == 0 {
			a.Stop()
		} else {
			a.Kill()
		}
		// One deleted while the agent is down.
		gone := remove()
		deleted = append(deleted, gone)
		deletedWhileDown = append(deletedWhileDown, gone)
		add()
		a.Start()
	}

	a.Eventually("the wanted pods running, the deleted ones stopped", func() (bool, string) {
		var bad []string
		for name := range live {
			p, ok := a.Pod(a.Static(name))
			if s, _ := containerStatus(p, "main"); !ok || s.State.Running == nil {
				bad = append(bad, name+" not running")
			}
		}
		for _, name := range deleted {
			n, err := runningOf(ctx, rt, a.Static(name))
			if err != nil {
				return false, err.Error()
			}
			if n > 0 {
				bad = append(bad, fmt.Sprintf("%s deleted, %d sandboxes/containers still run", name, n))
			}
		}
		sort.Strings(bad)
		return len(bad) == 0, strings.Join(bad, "; ")
	})
	// Every shim belongs to something containerd lists. (The containerd
	// is shared with other tests, whose sandboxes come and go: wait out
	// their passing shims; an orphan stays.)
	a.Eventually("no containerd shim without its sandbox", func() (bool, string) {
		orphans, err := orphanShims(ctx, rt, socket)
		if err != nil {
			return false, err.Error()
		}
		return len(orphans) == 0, "orphan shims: " + strings.Join(orphans, ", ")
	})
	if shimtest.Alive(planted.PID, planted.ID) {
		t.Errorf("the planted orphaned shim %s (pid %d) still runs", planted.ID, planted.PID)
	}
	a.Eventually("a node event naming the planted shim the agent ended", func() (bool, string) {
		var seen []string
		for _, e := range a.Events("") {
			if e.Reason == remote.ReasonOrphanedShimKilled {
				if strings.Contains(e.Message, planted.ID) {
					return true, ""
				}
				seen = append(seen, e.Message)
			}
		}
		return false, fmt.Sprintf("%s events: %q", remote.ReasonOrphanedShimKilled, seen)
	})
	if !shimtest.Alive(foreign.PID, foreign.ID) {
		t.Errorf("the agent ended shim %s (pid %d) of another containerd", foreign.ID, foreign.PID)
	}
	t.Logf("%d restarts; deleted while down: %v", rounds, deletedWhileDown)
}
