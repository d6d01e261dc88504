package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/test/harness"
)

// restartsEnv sets how many agent restarts TestDevicesSurviveAgentRestarts
// does (default 4 to keep CI short; the soak is 20).
const restartsEnv = "MINILET_DEVICE_RESTARTS"

// TestDevicesSurviveAgentRestarts restarts the agent again and again
// (SIGTERM and SIGKILL in turn) under pods holding devices of the example
// plugin, restarting the plugin in between and once making it register
// late. After every restart: no container restarted, each pod holds the
// same device as before, no device is held twice (by the pod-resources
// API and by the checkpoint), capacity stays 4, a pod asking for more
// than is free is rejected, and a new pod waiting for the late plugin
// gets the last free device.
func TestDevicesSurviveAgentRestarts(t *testing.T) {
	requireRoot(t)
	restarts := 4
	if v := os.Getenv(restartsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", restartsEnv, v)
		}
		restarts = n
	}
	a := harness.New(t)
	a.Start()
	plugin := a.StartPlugin("example.com/dev", "d0", "d1", "d2", "d3")
	waitDeviceCounts(t, a, 4, 4)

	holders := []string{"h0", "h1", "h2"}
	for _, name := range holders {
		a.WriteManifest(name+".yaml", devicePod(name, 1))
	}
	ids := map[string]string{} // pod → container ID
	for _, name := range holders {
		p := waitRunningReady(t, a, a.Static(name))
		ids[name] = p.Status.ContainerStatuses[0].ContainerID
	}
	before := checkNoDoubleAllocation(t, a, holders)

	for i := 0; i < restarts; i++ {
		how := "TERM"
		if i%2 == 1 {
			how = "KILL"
			a.Kill()
		} else {
			a.Stop()
		}
		if i%2 == 0 {
			plugin.Restart() // the plugin restarts while the agent is down
		}
		a.Start()
		t.Logf("restart %d (%s) done", i+1, how)
		waitDeviceCounts(t, a, 4, 4)
		for _, name := range holders {
			p := waitRunningReady(t, a, a.Static(name))
			c := p.Status.ContainerStatuses[0]
			if c.RestartCount != 0 || c.ContainerID != ids[name] {
				t.Fatalf("restart %d (%s): %s restarted its container: %s (restarts %d), was %s",
					i+1, how, name, c.ContainerID, c.RestartCount, ids[name])
			}
		}
		if got := checkNoDoubleAllocation(t, a, holders); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("restart %d (%s): devices moved: %v, were %v", i+1, how, got, before)
		}
	}

	// A slow plugin: after the next restart a new pod waits for it (with
	// an event) and gets the one free device; a greedy pod is refused.
	a.Stop()
	plugin.Stop()
	a.PluginArgs = []string{"--register-delay", "3s"}
	a.Start()
	slow := a.StartPlugin("example.com/dev", "d0", "d1", "d2", "d3")
	defer slow.Stop()
	a.WriteManifest("late.yaml", devicePod("late", 1))
	late := a.Static("late")
	a.Eventually("late waits for the plugin with an event", func() (bool, string) {
		evs := a.Events("default/" + late)
		return hasEvent(evs, v1.EventTypeNormal, devicemanager.ReasonWaitingForDevicePlugin, "example.com/dev"), eventSummary(evs)
	})
	waitRunningReady(t, a, late)
	all := append(append([]string(nil), holders...), "late")
	checkNoDoubleAllocation(t, a, all)
	a.WriteManifest("greedy.yaml", devicePod("greedy", 1))
	a.Eventually("greedy rejected: every device is held", func() (bool, string) {
		p, ok := a.Pod(a.Static("greedy"))
		return ok && p.Status.Phase == v1.PodFailed && p.Status.Reason == devicemanager.ReasonUnexpectedAdmissionError &&
			strings.HasPrefix(p.Status.Message, "Pod was rejected: Allocate failed due to requested number of devices unavailable"), describe(p, ok)
	})
	for _, name := range holders {
		p := waitRunningReady(t, a, a.Static(name))
		if c := p.Status.ContainerStatuses[0]; c.RestartCount != 0 || c.ContainerID != ids[name] {
			t.Fatalf("after the slow plugin: %s restarted its container", name)
		}
	}
	checkNoDoubleAllocation(t, a, all)
}

// devicePod is a static pod whose one container holds n example.com/dev.
func devicePod(name string, n int) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: host
    command: ["sleep", "100000"]
    resources: {limits: {example.com/dev: %d}}
`, name, n)
}

func waitRunningReady(t *testing.T, a *harness.Agent, name string) v1.Pod {
	t.Helper()
	var got v1.Pod
	a.Eventually(name+" Running and Ready", func() (bool, string) {
		p, ok := a.Pod(name)
		if !ok || p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
			return false, describe(p, ok)
		}
		got = p
		return true, ""
	})
	return got
}

func waitDeviceCounts(t *testing.T, a *harness.Agent, capacity, allocatable int64) {
	t.Helper()
	a.Eventually(fmt.Sprintf("the node reports example.com/dev capacity %d, allocatable %d", capacity, allocatable), func() (bool, string) {
		n := a.Node()
		c, al := n.Status.Capacity["example.com/dev"], n.Status.Allocatable["example.com/dev"]
		return c.Value() == capacity && al.Value() == allocatable, fmt.Sprintf("capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
	})
}

// checkNoDoubleAllocation reads who holds which device from the
// pod-resources API and from the checkpoint file: both must agree, each
// listed pod holds exactly one device, and no device is held twice. It
// returns pod → device.
func checkNoDoubleAllocation(t *testing.T, a *harness.Agent, pods []string) map[string]string {
	t.Helper()
	fromAPI := map[string]string{}
	a.Eventually("the pod-resources API lists every device pod", func() (bool, string) {
		got, err := podResourcesDevices(filepath.Join(a.RootDir, "pod-resources", "kubelet.sock"))
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if len(got[a.Static(p)]) != 1 {
				return false, fmt.Sprint(got)
			}
		}
		fromAPI = map[string]string{}
		for p, devs := range got {
			if len(devs) != 1 {
				return false, fmt.Sprintf("%s holds %v", p, devs)
			}
			fromAPI[strings.TrimSuffix(p, "-"+a.NodeName)] = devs[0]
		}
		return true, ""
	})
	owners := map[string]string{}
	for p, d := range fromAPI {
		if o, taken := owners[d]; taken {
			t.Fatalf("device %s is held by %s and %s (pod-resources API)", d, o, p)
		}
		owners[d] = p
	}

	// The checkpoint records the same, by pod UID.
	uids := map[string]string{}
	for _, p := range a.Pods() {
		uids[string(p.UID)] = strings.TrimSuffix(p.Name, "-"+a.NodeName)
	}
	var file struct {
		Data json.RawMessage `json:"data"`
	}
	var data struct {
		PodDeviceEntries []struct {
			PodUID    string   `json:"podUID"`
			DeviceIDs []string `json:"deviceIDs"`
		} `json:"podDeviceEntries"`
	}
	raw, err := os.ReadFile(filepath.Join(a.PluginDir, devicemanager.CheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(file.Data, &data); err != nil {
		t.Fatal(err)
	}
	fromCkpt := map[string]string{}
	seen := map[string]string{}
	for _, e := range data.PodDeviceEntries {
		name := uids[e.PodUID]
		for _, d := range e.DeviceIDs {
			if o, taken := seen[d]; taken {
				t.Fatalf("device %s is held by %s and %s (checkpoint)", d, o, name)
			}
			seen[d] = name
			fromCkpt[name] = d
		}
	}
	if fmt.Sprint(fromCkpt) != fmt.Sprint(fromAPI) {
		t.Fatalf("checkpoint %v and pod-resources API %v disagree", fromCkpt, fromAPI)
	}
	return fromAPI
}

// podResourcesDevices lists pod name → device IDs from the pod-resources API.
func podResourcesDevices(socket string) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				out[p.GetName()] = append(out[p.GetName()], d.GetDeviceIds()...)
			}
		}
	}
	for _, devs := range out {
		sort.Strings(devs)
	}
	return out, nil
}
