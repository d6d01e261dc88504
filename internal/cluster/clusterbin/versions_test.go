package clusterbin

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestSharedModulesHaveTheAgentsVersions: every module whose packages both
// the cluster binaries and the agent compile is at the same version in
// hack/cluster as in the agent's module. A version that differs compiles
// that module twice on a fresh machine (the Go build cache shares a
// package only when everything about it is equal), which costs minutes of
// the CI budget without a failing test to say so.
func TestSharedModulesHaveTheAgentsVersions(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs(filepath.Join(ModuleDir(), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, c := range Commands {
		cmds = append(cmds, "./"+c)
	}
	cluster := compiledModules(t, ModuleDir(), cmds...)
	agent := compiledModules(t, root, "./...")
	var differ []string
	for mod, v := range cluster {
		if av, ok := agent[mod]; ok && av != v {
			differ = append(differ, mod+": hack/cluster "+v+", agent "+av)
		}
	}
	sort.Strings(differ)
	if len(differ) > 0 {
		t.Errorf("modules compiled by both at different versions; align them (go get MODULE@VERSION in the module with the older one):\n%s",
			strings.Join(differ, "\n"))
	}
}

// compiledModules maps each module (other than the main one) whose
// packages the patterns compile to the version selected (the replacement's
// version where there is one).
func compiledModules(t *testing.T, dir string, patterns ...string) map[string]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	mods := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			mods[f[0]] = f[1]
		}
	}
	return mods
}

// TestKubeletHasTheControlPlanesVersions: the on-demand kubelet
// (hack/cluster/kubelet, a module of its own) compiles every module it
// shares with the control plane at the control plane's version, so that
// it is the kubelet of the cluster the tests run (k8s.io/kubernetes
// included) and its build reuses the control plane's compiled packages.
func TestKubeletHasTheControlPlanesVersions(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	var cmds []string
	for _, c := range Commands {
		cmds = append(cmds, "./"+c)
	}
	cluster := compiledModules(t, ModuleDir(), cmds...)
	kubelet := compiledModules(t, KubeletModuleDir(), ".")
	if kubelet["k8s.io/kubernetes"] == "" || kubelet["k8s.io/kubernetes"] != cluster["k8s.io/kubernetes"] {
		t.Errorf("k8s.io/kubernetes: kubelet %q, control plane %q", kubelet["k8s.io/kubernetes"], cluster["k8s.io/kubernetes"])
	}
	var differ []string
	for mod, v := range kubelet {
		if cv, ok := cluster[mod]; ok && cv != v {
			differ = append(differ, mod+": hack/cluster/kubelet "+v+", hack/cluster "+cv)
		}
	}
	sort.Strings(differ)
	if len(differ) > 0 {
		t.Errorf("modules at different versions in the kubelet's module; align them:\n%s", strings.Join(differ, "\n"))
	}
}
