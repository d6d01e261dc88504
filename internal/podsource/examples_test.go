package podsource

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Every pod in examples/ is one a newcomer copies: it must be safe to copy.
// An example that ran a server as root on the host image while mounting a
// host path served the agent's private keys to anyone on the network (the
// web example did, serving the host's /tmp with the agent's root dir in
// it). So no example may mount a host path or share the host's
// namespaces, and every container runs as a non-root user, without
// privilege escalation, capabilities or a writable root filesystem.
func TestExamplesAreSafeToCopy(t *testing.T) {
	root := filepath.Join("..", "..", "examples")
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".json")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifests found under %s", root)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := ParseManifest(data, f, "file", node, time.Now())
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, pod := range pods {
			for _, problem := range unsafeExample(pod) {
				t.Errorf("%s: pod %s: %s", f, pod.Name, problem)
			}
		}
	}
}

// unsafeExample lists what makes pod unsafe to copy as an example.
func unsafeExample(pod *v1.Pod) []string {
	var out []string
	spec := pod.Spec
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out = append(out, "volume "+v.Name+" mounts host path "+v.HostPath.Path)
		}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		out = append(out, "shares the host's network, PID or IPC namespace")
	}
	podSC := spec.SecurityContext
	if podSC == nil {
		podSC = &v1.PodSecurityContext{}
	}
	var all []v1.Container
	all = append(all, spec.InitContainers...)
	all = append(all, spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			sc = &v1.SecurityContext{}
		}
		where := "container " + c.Name + ": "
		user, nonRoot := sc.RunAsUser, sc.RunAsNonRoot
		if user == nil {
			user = podSC.RunAsUser
		}
		if nonRoot == nil {
			nonRoot = podSC.RunAsNonRoot
		}
		switch {
		case user == nil:
			out = append(out, where+"no runAsUser: it would run as the image's user, root for image host")
		case *user == 0:
			out = append(out, where+"runs as root (runAsUser 0)")
		}
		if nonRoot == nil || !*nonRoot {
			out = append(out, where+"runAsNonRoot is not true")
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, where+"is privileged")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			out = append(out, where+"allowPrivilegeEscalation is not false")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			out = append(out, where+"readOnlyRootFilesystem is not true (image host's root is the host's)")
		}
		if caps := sc.Capabilities; caps == nil || len(caps.Add) > 0 || !dropsAll(caps.Drop) {
			out = append(out, where+"does not drop ALL capabilities (or adds some)")
		}
	}
	return out
}

func dropsAll(drop []v1.Capability) bool {
	for _, c := range drop {
		if strings.EqualFold(string(c), "ALL") {
			return true
		}
	}
	return false
}
