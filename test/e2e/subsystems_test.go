package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/test/harness"
)

func hasEvent(evs []v1.Event, typ, reason, contains string) bool {
	for _, e := range evs {
		if e.Type == typ && e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

func eventSummary(evs []v1.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "[%s %s %q x%d] ", e.Type, e.Reason, e.Message, e.Count)
	}
	return b.String()
}

func TestExecLivenessFailureRestartsTheContainer(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	healthy := filepath.Join(t.TempDir(), "healthy")
	if err := os.WriteFile(healthy, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.WriteManifest("live.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    livenessProbe:
      exec: {command: ["cat", "%s"]}
      periodSeconds: 1
      failureThreshold: 2
`, healthy))
	name := a.Static("live")
	a.Eventually("live Running", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	if err := os.Remove(healthy); err != nil {
		t.Fatal(err)
	}
	a.Eventually("a restart after the liveness probe failed", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && s.RestartCount >= 1, describe(p, ok)
	})
	if err := os.WriteFile(healthy, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Eventually("Unhealthy and Killing events", func() (bool, string) {
		evs := a.Events("default/" + name)
		return hasEvent(evs, v1.EventTypeWarning, "Unhealthy", "Liveness probe failed") &&
			hasEvent(evs, v1.EventTypeNormal, "Killing", "failed liveness probe, will be restarted"), eventSummary(evs)
	})
}

func TestHTTPReadinessFlipsReadyWithoutRestarts(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := harness.FreePort(t)
	a.WriteManifest("ready.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: ready}
spec:
  containers:
  - name: web
    image: host
    command: ["python3", "-m", "http.server", "%d", "--directory", "%s"]
    readinessProbe:
      httpGet: {port: %d, path: /ready}
      periodSeconds: 1
      failureThreshold: 1
`, port, dir, port))
	// The probe reaches the server at the pod's IP, in its own network
	// namespace.
	name := a.Static("ready")
	ready := func(want bool) func() (bool, string) {
		return func() (bool, string) {
			p, ok := a.Pod(name)
			s, _ := containerStatus(p, "web")
			return ok && s.Ready == want && s.RestartCount == 0, describe(p, ok)
		}
	}
	a.Eventually("ready", ready(true))
	if err := os.Remove(filepath.Join(dir, "ready")); err != nil {
		t.Fatal(err)
	}
	a.Eventually("not ready, not restarted", ready(false))
	p, _ := a.Pod(name)
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status != v1.ConditionFalse {
			t.Errorf("pod Ready condition = %s while the container is unready", c.Status)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Eventually("ready again", ready(true))
}

func TestPodThatDoesNotFitIsRejected(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("huge.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    resources: {requests: {cpu: "5000"}}
`)
	a.WriteManifest("small.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: small}
spec:
  containers:
  - {name: main, image: host, command: ["sleep", "1000"], resources: {requests: {cpu: 10m}}}
`)
	a.Eventually("huge Failed with OutOfcpu", func() (bool, string) {
		p, ok := a.Pod(a.Static("huge"))
		return ok && p.Status.Phase == v1.PodFailed && p.Status.Reason == "OutOfcpu", describe(p, ok)
	})
	a.Eventually("small Running", func() (bool, string) {
		p, ok := a.Pod(a.Static("small"))
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.Eventually("an OutOfcpu warning event", func() (bool, string) {
		evs := a.Events("default/" + a.Static("huge"))
		return hasEvent(evs, v1.EventTypeWarning, "OutOfcpu", ""), eventSummary(evs)
	})
	n := a.Node()
	capCPU, allocMem, capMem := n.Status.Capacity.Cpu(), n.Status.Allocatable.Memory(), n.Status.Capacity.Memory()
	if capCPU.IsZero() || allocMem.Cmp(*capMem) >= 0 {
		t.Errorf("node capacity %v allocatable %v: want cpu capacity and allocatable memory below capacity (eviction threshold)", n.Status.Capacity, n.Status.Allocatable)
	}
}

func TestMemoryLimitIsEnforcedAndCgroupsFollowQoS(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("oom.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: oom}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: host
    command: ["python3", "-c", "b = []\nwhile True: b.append(bytearray(1 << 20))"]
    resources: {requests: {memory: 32Mi}, limits: {memory: 32Mi}}
`)
	a.WriteManifest("burst.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: burst}
spec:
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "cat /proc/self/cgroup > /dev/stdout; exec sleep 1000"]
    resources: {requests: {cpu: 100m}}
`)
	a.Eventually("oom Failed with OOMKilled and exit code 137", func() (bool, string) {
		p, ok := a.Pod(a.Static("oom"))
		s, _ := containerStatus(p, "main")
		term := s.State.Terminated
		return ok && p.Status.Phase == v1.PodFailed && term != nil && term.Reason == "OOMKilled" && term.ExitCode == 137, describe(p, ok)
	})
	burst := a.Static("burst")
	var uid string
	a.Eventually("burst Running", func() (bool, string) {
		p, ok := a.Pod(burst)
		uid = string(p.UID)
		return ok && p.Status.Phase == v1.PodRunning && p.Status.QOSClass == v1.PodQOSBurstable, describe(p, ok)
	})
	want := a.CgroupRoot + "/kubepods/burstable/pod" + uid + "/"
	a.Eventually("the container runs in its pod's burstable cgroup", func() (bool, string) {
		var s string
		err := a.Get("/containerLogs/default/"+burst+"/main", &s)
		return err == nil && strings.Contains(s, "memory:"+want), s
	})
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", a.CgroupRoot, "kubepods/burstable/pod"+uid, "cpu.shares"))
	if err != nil || strings.TrimSpace(string(b)) != "102" {
		t.Errorf("pod cpu.shares = %q (%v), want 102 for a 100m request", b, err)
	}
	a.Eventually("the Summary API reports the pod", func() (bool, string) {
		var sum statsapi.Summary
		if err := a.Get("/stats/summary", &sum); err != nil {
			return false, err.Error()
		}
		for _, p := range sum.Pods {
			if p.PodRef.Name == burst && p.Memory != nil && p.Memory.WorkingSetBytes != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods in summary", len(sum.Pods))
	})
}

func TestDevicePluginResourceIsAdvertisedAndAllocated(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.StartPlugin("example.com/dev", "d1", "d2")
	a.Eventually("the node advertises 2 example.com/dev", func() (bool, string) {
		n := a.Node()
		q := n.Status.Allocatable[v1.ResourceName("example.com/dev")]
		return q.Cmp(resource.MustParse("2")) == 0, fmt.Sprint(n.Status.Allocatable)
	})
	a.WriteManifest("dev.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: dev}
spec:
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "echo devices=$EXAMPLE_DEVICES; exec sleep 1000"]
    resources: {limits: {example.com/dev: 1}}
`)
	dev := a.Static("dev")
	a.Eventually("dev logs its device", func() (bool, string) {
		var s string
		err := a.Get("/containerLogs/default/"+dev+"/main", &s)
		return err == nil && (strings.Contains(s, "devices=d1") || strings.Contains(s, "devices=d2")), fmt.Sprint(s, err)
	})
	a.WriteManifest("greedy.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    resources: {limits: {example.com/dev: 2}}
`)
	a.Eventually("greedy rejected: only one device is left", func() (bool, string) {
		p, ok := a.Pod(a.Static("greedy"))
		return ok && p.Status.Phase == v1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError", describe(p, ok)
	})
}

func TestEventsSurviveAnAgentRestart(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("ev.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: ev}
spec:
  containers:
  - {name: main, image: host, command: ["sleep", "1000"]}
`)
	name := a.Static("ev")
	a.Eventually("a Started event", func() (bool, string) {
		evs := a.Events("default/" + name)
		return hasEvent(evs, v1.EventTypeNormal, "Started", "main"), eventSummary(evs)
	})
	a.Stop()
	a.Start()
	evs := a.Events("default/" + name)
	if !hasEvent(evs, v1.EventTypeNormal, "Started", "main") {
		t.Fatalf("events after restart: %s", eventSummary(evs))
	}
	out, err := a.CLI("get", "events")
	if err != nil || !strings.Contains(out, "Started") {
		t.Errorf("minilet get events: %v\n%s", err, out)
	}
}

func TestDiskPressureIsReportedAndRejectsPods(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	// A threshold no real disk meets: the node is under disk pressure at once.
	a.ExtraArgs = []string{"--eviction-hard", "nodefs.available<100%"}
	a.Start()
	a.Eventually("DiskPressure=True on the node", func() (bool, string) {
		n := a.Node()
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeDiskPressure {
				return c.Status == v1.ConditionTrue, string(c.Status)
			}
		}
		return false, "no DiskPressure condition"
	})
	a.WriteManifest("late.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: late}
spec:
  containers:
  - {name: main, image: host, command: ["sleep", "1000"]}
`)
	a.Eventually("late rejected as Evicted", func() (bool, string) {
		p, ok := a.Pod(a.Static("late"))
		return ok && p.Status.Phase == v1.PodFailed && p.Status.Reason == "Evicted" && strings.Contains(p.Status.Message, "DiskPressure"), describe(p, ok)
	})
}
