package imagereg_test

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// A minilet agent on the embedded runtime pulls the images from the
// registry and runs their programs in a pod, with each image's entrypoint,
// command and user.
func TestEmbeddedRuntimeRunsTheImagesInAPod(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	r := registry(t)
	type ctr struct{ name, id, spec, want string }
	ctrs := []ctr{
		{"busybox", "BusyBox", `command: ["sh", "-c", "echo busybox-ok $(id -u)"]`, "busybox-ok 0\n"},
		{"nonroot", "NonRoot", `command: ["id", "-u"]`, "1234\n"},
		{"nnp", "Nonewprivs", `securityContext: {runAsUser: 1000}`, "Effective uid: 0\n"},
		{"hostname", "GlibcDnsTesting", `command: ["sh", "-c", "echo $(hostname)';'"]`, "imagereg-pod;\n"},
	}
	if shared.realAgn {
		ctrs = append(ctrs, ctr{"agnhost", "Agnhost", `args: ["entrypoint-tester", "ok"]`, "[/agnhost entrypoint-tester ok]\n"})
	}
	var m strings.Builder
	m.WriteString("apiVersion: v1\nkind: Pod\nmetadata: {name: imagereg}\nspec:\n  hostname: imagereg-pod\n  restartPolicy: Never\n  containers:\n")
	for _, c := range ctrs {
		fmt.Fprintf(&m, "  - name: %s\n    image: %q\n    %s\n", c.name, imageByID(t, r, c.id).Ref, c.spec)
	}

	a := harness.New(t)
	a.Start()
	a.WriteManifest("imagereg.yaml", m.String())
	name := a.Static("imagereg")
	a.Eventually("the pod succeeds", func() (bool, string) {
		p, ok := a.Pod(name)
		if !ok {
			return false, "pod not listed"
		}
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s: %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	for _, c := range ctrs {
		var logs string
		if err := a.Get("/containerLogs/default/"+name+"/"+c.name, &logs); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if logs != c.want {
			t.Errorf("container %s (%s) printed %q; want %q", c.name, c.id, logs, c.want)
		}
	}
}
