package e2e

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestContainerRestartRules: in a restartPolicy Never pod, a container
// whose rule restarts it on exit code 42 is restarted (the pod stays
// Running), while one whose exit code matches no rule is not, and its
// pod ends Failed, as does a restartPolicy Always pod whose container has
// restartPolicy Never — as the upstream ContainerRestartRules specs expect.
func TestContainerRestartRules(t *testing.T) {
	for _, rt := range podRuntimes() {
		t.Run(rt.name, func(t *testing.T) {
			a := rt.start(t)
			rule := `restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]`
			a.WriteManifest("match.yaml", rt.manifest("rr-match", "", `command: ["sh", "-c", "exit 42"], `+rule))
			a.WriteManifest("miss.yaml", rt.manifest("rr-miss", "", `command: ["sh", "-c", "exit 1"], `+rule))
			// The container's own Never wins over its pod's Always.
			a.WriteManifest("never.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: rr-never}
spec:
  restartPolicy: Always
  containers:
  - {name: main, %s, command: ["sh", "-c", "exit 1"], restartPolicy: Never}
`, rt.image))
			match, miss, never := a.Static("rr-match"), a.Static("rr-miss"), a.Static("rr-never")
			a.Eventually("the matching container restarted, its pod Running", func() (bool, string) {
				p, ok := a.Pod(match)
				if !ok || len(p.Status.ContainerStatuses) == 0 {
					return false, describe(p, ok)
				}
				n := p.Status.ContainerStatuses[0].RestartCount
				return n > 0 && p.Status.Phase == v1.PodRunning, fmt.Sprintf("phase %s, restarts %d", p.Status.Phase, n)
			})
			a.Eventually("the other pod Failed without a restart", func() (bool, string) {
				p, ok := a.Pod(miss)
				if !ok || len(p.Status.ContainerStatuses) == 0 {
					return false, describe(p, ok)
				}
				n := p.Status.ContainerStatuses[0].RestartCount
				return p.Status.Phase == v1.PodFailed && n == 0, fmt.Sprintf("phase %s, restarts %d", p.Status.Phase, n)
			})
			a.Eventually("the pod Always whose container has restartPolicy Never Failed without a restart", func() (bool, string) {
				p, ok := a.Pod(never)
				if !ok || len(p.Status.ContainerStatuses) == 0 {
					return false, describe(p, ok)
				}
				n := p.Status.ContainerStatuses[0].RestartCount
				return p.Status.Phase == v1.PodFailed && n == 0, fmt.Sprintf("phase %s, restarts %d", p.Status.Phase, n)
			})
		})
	}
}

// TestRestartAllContainers: a container whose exit matches a rule with
// the action RestartAllContainers starts its whole pod over in place: the
// init container runs again, the other app container is stopped and
// started again, and the pod (restartPolicy Never) keeps Running instead
// of failing. The emptyDir survives, so the second run does not exit 42
// and nothing loops.
func TestRestartAllContainers(t *testing.T) {
	for _, rt := range podRuntimes() {
		t.Run(rt.name, func(t *testing.T) {
			a := rt.start(t)
			name := "ra-" + rt.name
			a.WriteManifest("ra.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %[1]s}
spec:
  restartPolicy: Never
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - {name: init, %[2]s, command: ["sh", "-c", "exit 0"]}
  containers:
  - name: src
    %[3]s
    command: ["sh", "-c", "if [ -f /work/done ]; then exec sleep 1000; fi; touch /work/done; exit 42"]
    volumeMounts: [{name: work, mountPath: /work}]
    restartPolicy: Never
    restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [42]}}]
  - {name: other, %[2]s, command: ["sleep", "1000"]}
`, name, rt.image, strings.ReplaceAll(rt.image, ", ", "\n    ")))
			pod := a.Static(name)
			a.Eventually("every container restarted once, the pod Running", func() (bool, string) {
				p, ok := a.Pod(pod)
				if !ok || len(p.Status.ContainerStatuses) != 2 || len(p.Status.InitContainerStatuses) != 1 {
					return false, describe(p, ok)
				}
				var got []string
				done := p.Status.Phase == v1.PodRunning
				for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
					got = append(got, fmt.Sprintf("%s:%d", cs.Name, cs.RestartCount))
					done = done && cs.RestartCount >= 1 && cs.LastTerminationState.Terminated != nil
				}
				return done, fmt.Sprintf("phase %s, restarts %v", p.Status.Phase, got)
			})
			p, _ := a.Pod(pod)
			for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if cs.RestartCount != 1 {
					t.Errorf("%s restarted %d times, want once (no loop)", cs.Name, cs.RestartCount)
				}
			}
		})
	}
}
