package e2e

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// manifest is a pod of one container, main, on the runtime's image: spec
// adds pod fields, container the container's.
func (rt podRuntime) manifest(name, spec, container string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
%s  containers:
  - {name: main, %s, %s}
`, name, spec, rt.image, container)
}

// TestTerminationMessage: what a container writes to /dev/termination-log
// is its terminated state's message (and `describe` shows it); with
// FallbackToLogsOnError a failed container that wrote none gets the end of
// its log instead, its last output as it is when it has no newline.
func TestTerminationMessage(t *testing.T) {
	for _, rt := range podRuntimes() {
		t.Run(rt.name, func(t *testing.T) {
			a := rt.start(t)
			a.WriteManifest("bye.yaml", rt.manifest("tm-bye-"+rt.name, "",
				`command: ["/bin/sh", "-c", "printf bye > /dev/termination-log; exit 3"]`))
			a.WriteManifest("fallback.yaml", rt.manifest("tm-logs-"+rt.name, "",
				`terminationMessagePolicy: FallbackToLogsOnError, command: ["/bin/sh", "-c", "echo first; echo last words; exit 2"]`))
			// Its last output without a newline is the message as it is.
			a.WriteManifest("nonl.yaml", rt.manifest("tm-nonl-"+rt.name, "",
				`terminationMessagePolicy: FallbackToLogsOnError, command: ["/bin/sh", "-c", "printf DONE; exit 1"]`))

			bye := a.Static("tm-bye-" + rt.name)
			a.Eventually("exit 3 with message bye", func() (bool, string) {
				p, ok := a.Pod(bye)
				s, _ := containerStatus(p, "main")
				term := s.State.Terminated
				return ok && term != nil && term.ExitCode == 3 && term.Message == "bye", describe(p, ok)
			})
			out, err := a.CLI("describe", "pod", bye)
			if err != nil || !strings.Contains(out, "Message:") || !strings.Contains(out, "bye") {
				t.Errorf("describe pod %s (%v) does not show the message:\n%s", bye, err, out)
			}

			logs := a.Static("tm-logs-" + rt.name)
			a.Eventually("exit 2 with the log's end as message", func() (bool, string) {
				p, ok := a.Pod(logs)
				s, _ := containerStatus(p, "main")
				term := s.State.Terminated
				return ok && term != nil && term.ExitCode == 2 && term.Message == "first\nlast words\n", describe(p, ok)
			})

			nonl := a.Static("tm-nonl-" + rt.name)
			a.Eventually("exit 1 with message DONE, no newline added", func() (bool, string) {
				p, ok := a.Pod(nonl)
				s, _ := containerStatus(p, "main")
				term := s.State.Terminated
				if term != nil {
					return term.ExitCode == 1 && term.Message == "DONE", fmt.Sprintf("exit %d, message %q", term.ExitCode, term.Message)
				}
				return false, describe(p, ok)
			})
		})
	}
}

// TestActiveDeadline: a pod still running when its activeDeadlineSeconds
// have passed is stopped and ends Failed with reason DeadlineExceeded and
// a DeadlineExceeded event.
func TestActiveDeadline(t *testing.T) {
	for _, rt := range podRuntimes() {
		t.Run(rt.name, func(t *testing.T) {
			a := rt.start(t)
			a.WriteManifest("deadline.yaml", rt.manifest("deadline-"+rt.name,
				"  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 1\n",
				`command: ["sleep", "1000"]`))
			name := a.Static("deadline-" + rt.name)
			a.Eventually("Failed with reason DeadlineExceeded, its container stopped", func() (bool, string) {
				p, ok := a.Pod(name)
				s, _ := containerStatus(p, "main")
				return ok && p.Status.Phase == v1.PodFailed && p.Status.Reason == "DeadlineExceeded" &&
					p.Status.Message == "Pod was active on the node longer than the specified deadline" &&
					s.State.Terminated != nil, describe(p, ok)
			})
			a.Eventually("a DeadlineExceeded event", func() (bool, string) {
				evs := a.Events("default/" + name)
				for _, e := range evs {
					if e.Reason == "DeadlineExceeded" {
						return true, ""
					}
				}
				return false, fmt.Sprint(len(evs), " events")
			})
		})
	}
}
