// Package e2e runs the real minilet binary on the embedded runtime and
// checks, through its HTTP API and CLI, what a user would see.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end tests need root (cgroups); CI runs as root")
	}
}

func containerStatus(p v1.Pod, name string) (v1.ContainerStatus, bool) {
	for _, s := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}

func describe(p v1.Pod, ok bool) string {
	if !ok {
		return "pod not listed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s reason=%s", p.Status.Phase, p.Status.Reason)
	for _, s := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " [%s ready=%v restarts=%d state=%+v last=%+v]", s.Name, s.Ready, s.RestartCount, s.State, s.LastTerminationState)
	}
	return b.String()
}

func TestPodRunsAndIsVisibleThroughAPIAndCLI(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("web.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "echo hello from $(GREETING_TARGET); exec sleep 1000"]
    env:
    - {name: GREETING_TARGET, value: minilet}
`)
	name := a.Static("web")
	a.Eventually("web Running and Ready", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && p.Status.Phase == v1.PodRunning && s.Ready && s.State.Running != nil, describe(p, ok)
	})
	p, _ := a.Pod(name)
	if p.Annotations["kubernetes.io/config.source"] != "file" {
		t.Errorf("config.source annotation = %q, want file", p.Annotations["kubernetes.io/config.source"])
	}
	if p.Status.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("qosClass = %q, want BestEffort", p.Status.QOSClass)
	}
	a.Eventually("the container's log through the API", func() (bool, string) {
		var s string
		err := a.Get("/containerLogs/default/"+name+"/main", &s)
		return err == nil && strings.Contains(s, "hello from minilet"), fmt.Sprint(s, err)
	})
	out, err := a.CLI("get", "pods")
	if err != nil || !strings.Contains(out, name) || !strings.Contains(out, "Running") || !strings.Contains(out, "1/1") {
		t.Errorf("minilet get pods: %v\n%s", err, out)
	}
	out, err = a.CLI("logs", name)
	if err != nil || !strings.Contains(out, "hello from minilet") {
		t.Errorf("minilet logs: %v\n%s", err, out)
	}
	out, err = a.CLI("describe", "pod", name)
	if err != nil || !strings.Contains(out, "BestEffort") || !strings.Contains(out, "Started") {
		t.Errorf("minilet describe pod: %v\n%s", err, out)
	}
}

func TestCrashLoopBackOffKeepsTheLastExitCode(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("crash.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "echo dying; exit 3"]}
`)
	name := a.Static("crash")
	a.Eventually("CrashLoopBackOff with exit code 3 in lastState", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		w := s.State.Waiting
		last := s.LastTerminationState.Terminated
		return ok && w != nil && w.Reason == "CrashLoopBackOff" && last != nil && last.ExitCode == 3 && s.RestartCount >= 1, describe(p, ok)
	})
	a.Eventually("a BackOff warning event", func() (bool, string) {
		evs := a.Events("default/" + name)
		for _, e := range evs {
			if e.Reason == "BackOff" && e.Type == v1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(evs), " events")
	})
}

func TestInitContainersRunInOrderBeforeTheApp(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	out := filepath.Join(t.TempDir(), "order")
	a.WriteManifest("init.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: init}
spec:
  initContainers:
  - {name: first, image: host, command: ["/bin/sh", "-c", "echo first >> %[1]s"]}
  - {name: second, image: host, command: ["/bin/sh", "-c", "echo second >> %[1]s"]}
  containers:
  - {name: app, image: host, command: ["/bin/sh", "-c", "echo app >> %[1]s; exec sleep 1000"]}
`, out))
	name := a.Static("init")
	a.Eventually("init pod Running", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.Eventually("order first, second, app", func() (bool, string) {
		b, _ := os.ReadFile(out)
		return string(b) == "first\nsecond\napp\n", string(b)
	})
	p, _ := a.Pod(name)
	for _, s := range p.Status.InitContainerStatuses {
		if s.State.Terminated == nil || s.State.Terminated.Reason != "Completed" {
			t.Errorf("init container %s: state %+v, want terminated Completed", s.Name, s.State)
		}
	}
}

func TestRestartPolicies(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	counter := filepath.Join(t.TempDir(), "tries")
	a.WriteManifest("never.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "exit 1"]}
`)
	// Fails on the first try, succeeds on the second.
	a.WriteManifest("onfailure.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: onfailure}
spec:
  restartPolicy: OnFailure
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "echo x >> %[1]s; test $(wc -l < %[1]s) -ge 2"]}
`, counter))
	a.Eventually("Never: Failed with exit code 1, not restarted", func() (bool, string) {
		p, ok := a.Pod(a.Static("never"))
		s, _ := containerStatus(p, "main")
		term := s.State.Terminated
		return ok && p.Status.Phase == v1.PodFailed && term != nil && term.ExitCode == 1 && term.Reason == "Error" && s.RestartCount == 0, describe(p, ok)
	})
	a.Eventually("OnFailure: Succeeded after one restart", func() (bool, string) {
		p, ok := a.Pod(a.Static("onfailure"))
		s, _ := containerStatus(p, "main")
		return ok && p.Status.Phase == v1.PodSucceeded && s.RestartCount == 1, describe(p, ok)
	})
}

func TestManifestEditReplacesThePod(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	manifest := `
apiVersion: v1
kind: Pod
metadata: {name: edit}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "echo version=$V; exec sleep 1000"]
    env: [{name: V, value: "%s"}]
`
	a.WriteManifest("edit.yaml", fmt.Sprintf(manifest, "one"))
	name := a.Static("edit")
	var firstUID string
	a.Eventually("version one Running", func() (bool, string) {
		p, ok := a.Pod(name)
		firstUID = string(p.UID)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.WriteManifest("edit.yaml", fmt.Sprintf(manifest, "two"))
	a.Eventually("version two Running under a new UID, the old one gone", func() (bool, string) {
		var running, others int
		for _, p := range a.Pods() {
			if p.Name != name {
				continue
			}
			if string(p.UID) != firstUID && p.Status.Phase == v1.PodRunning {
				running++
			} else {
				others++
			}
		}
		return running == 1 && others == 0, fmt.Sprintf("running=%d others=%d", running, others)
	})
	a.Eventually("the new container logs version=two", func() (bool, string) {
		out, err := a.CLI("logs", name)
		return err == nil && strings.Contains(out, "version=two"), out
	})
}

func TestDeletingTheManifestTerminatesGracefully(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	marker := filepath.Join(t.TempDir(), "got-term")
	a.WriteManifest("bye.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: bye}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "trap 'echo term > %s; exit 0' TERM; while true; do sleep 0.1; done"]
`, marker))
	name := a.Static("bye")
	a.Eventually("bye Running", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.RemoveManifest("bye.yaml")
	a.Eventually("the container saw SIGTERM", func() (bool, string) {
		b, err := os.ReadFile(marker)
		return err == nil && strings.TrimSpace(string(b)) == "term", fmt.Sprint(err)
	})
	a.Eventually("the pod is gone", func() (bool, string) {
		p, ok := a.Pod(name)
		return !ok, describe(p, ok)
	})
}

func TestAgentRestartKeepsContainersRunning(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	pidFile := filepath.Join(t.TempDir(), "pid")
	a.WriteManifest("keep.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: keep}
spec:
  initContainers:
  - {name: once, image: host, command: ["/bin/sh", "-c", "echo init >> %[1]s.init"]}
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "echo $$$$ > %[1]s; exec sleep 1000"]}
`, pidFile))
	name := a.Static("keep")
	var before v1.ContainerStatus
	var startTime string
	a.Eventually("keep Running", func() (bool, string) {
		p, ok := a.Pod(name)
		before, _ = containerStatus(p, "main")
		if p.Status.StartTime != nil {
			startTime = p.Status.StartTime.String()
		}
		return ok && p.Status.Phase == v1.PodRunning && before.ContainerID != "", describe(p, ok)
	})
	var pid int
	a.Eventually("the container wrote its pid", func() (bool, string) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0, string(b)
	})
	a.Stop()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("stopping the agent stopped the container (pid %d): %v", pid, err)
	}
	a.Start()
	a.Eventually("the same container Running after the restart", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && p.Status.Phase == v1.PodRunning && s.ContainerID == before.ContainerID && s.RestartCount == before.RestartCount && s.State.Running != nil, describe(p, ok)
	})
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("container process %d gone after the agent restart: %v", pid, err)
	}
	if p, _ := a.Pod(name); p.Status.StartTime == nil || p.Status.StartTime.String() != startTime {
		t.Errorf("pod startTime changed across the agent restart: %v, was %s", p.Status.StartTime, startTime)
	}
	b, _ := os.ReadFile(pidFile + ".init")
	if string(b) != "init\n" {
		t.Errorf("init container ran %q times; it must not run again after an agent restart", string(b))
	}
}

func TestBadManifestIsReportedAndOthersRun(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("bad.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - {name: main, image: host, command: ["sleep", "1000"], bogusField: 1}
`)
	a.WriteManifest("good.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: good}
spec:
  containers:
  - {name: main, image: host, command: ["sleep", "1000"]}
`)
	a.Eventually("good Running", func() (bool, string) {
		p, ok := a.Pod(a.Static("good"))
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.Eventually("a Warning event naming bad.yaml and the field", func() (bool, string) {
		evs := a.Events("")
		for _, e := range evs {
			if e.Type == v1.EventTypeWarning && strings.Contains(e.Message, "bad.yaml") && strings.Contains(e.Message, "bogusField") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events: %v", len(evs), evs)
	})
	if _, ok := a.Pod(a.Static("bad")); ok {
		t.Error("the bad manifest produced a pod")
	}
}

func TestManifestRestoredWhileTerminatingRunsAgain(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	manifest := `
apiVersion: v1
kind: Pod
metadata: {name: back}
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"]}
`
	a.WriteManifest("back.yaml", manifest)
	name := a.Static("back")
	var first string
	a.Eventually("back Running", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		first = s.ContainerID
		return ok && p.Status.Phase == v1.PodRunning && first != "", describe(p, ok)
	})
	a.RemoveManifest("back.yaml")
	a.Eventually("back terminating", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.DeletionTimestamp != nil, describe(p, ok)
	})
	a.WriteManifest("back.yaml", manifest) // same content: same UID
	a.Eventually("back Running again in a new container", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && s.State.Running != nil && s.ContainerID != first, describe(p, ok)
	})
}
