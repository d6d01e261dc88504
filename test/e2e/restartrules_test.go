package e2e

import (
	"fmt"
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
