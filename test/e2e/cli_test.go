package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// TestCLIKubectlHabits drives the real binary as a kubectl user would:
// the manifest's name finds the static pod, -l and -o name filter and
// print, one name prints one object, -w prints what changes, describe
// shows volumes and mounts, and an unknown type fails with kubectl's
// message and a non-zero exit.
func TestCLIKubectlHabits(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("web.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  volumes:
  - {name: scratch, emptyDir: {}}
  containers:
  - name: main
    image: host
    command: ["/bin/sleep", "1000"]
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
`)
	web := a.Static("web")
	a.Eventually("web Running", func() (bool, string) {
		p, ok := a.Pod(web)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})

	// A watch started now prints the pods there are, then new ones.
	watch := a.CLICommand("get", "pods", "-w", "-o", "name")
	var watchOut harness.Output
	watch.Stdout, watch.Stderr = &watchOut, &watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })

	if out, err := a.CLI("get", "pod", "web"); err != nil || !strings.Contains(out, web) || !strings.Contains(out, "Running") {
		t.Errorf("get pod web (the manifest's name): %v\n%s", err, out)
	}
	if out, err := a.CLI("get", "pods", "-l", "app=web", "-o", "name"); err != nil || out != "pod/"+web+"\n" {
		t.Errorf("get pods -l app=web -o name: %v\n%q", err, out)
	}
	if out, err := a.CLI("get", "pods", "-l", "app=db", "-A"); err != nil || !strings.Contains(out, "No resources found") {
		t.Errorf("get pods -l app=db -A: %v\n%s", err, out)
	}
	if out, err := a.CLI("get", "pod", "web", "-o", "yaml"); err != nil || !strings.Contains(out, "\nkind: Pod\n") || strings.Contains(out, "PodList") {
		t.Errorf("get pod web -o yaml should print the Pod: %v\n%s", err, out)
	}
	out, err := a.CLI("get", "nonsense")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || out != "error: the server doesn't have a resource type \"nonsense\"\n" {
		t.Errorf("get nonsense: %v\n%q", err, out)
	}
	if out, err := a.CLI("describe", "pod", "web"); err != nil ||
		!strings.Contains(out, "/scratch from scratch (rw)") || !strings.Contains(out, "EmptyDir (a temporary directory that shares a pod's lifetime)") {
		t.Errorf("describe pod web: %v\n%s", err, out)
	}

	a.WriteManifest("db.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: db}
spec:
  containers:
  - {name: main, image: host, command: ["/bin/sleep", "1000"]}
`)
	a.Eventually("the watch prints the new pod", func() (bool, string) {
		s := watchOut.String()
		return strings.HasPrefix(s, "pod/"+web+"\n") && strings.Contains(s, "pod/"+a.Static("db")+"\n"), s
	})
}
