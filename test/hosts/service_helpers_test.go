package hosts

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
	"github.com/minilet/minilet/test/harness"
)

// installMinilet installs minilet in a node the way scripts/install.sh
// lays it out (binaries in /usr/local/bin, the unit in
// /etc/systemd/system, the configuration in /etc/minilet) plus the CNI
// plugins in /opt/cni/bin, with config as /etc/minilet/config.yaml
// (deploy/etc/config.yaml when empty). It does not start the service.
func installMinilet(ctx context.Context, t *testing.T, n *Node, config string) {
	t.Helper()
	bin := filepath.Dir(harness.Binary(t))
	cni := podnettest.BinDir(t)
	root := harness.RepoRoot()
	copies := [][2]string{
		{filepath.Join(bin, "minilet"), "/usr/local/bin/minilet"},
		{filepath.Join(bin, "minilet-monitor"), "/usr/local/bin/minilet-monitor"},
		{filepath.Join(bin, "minilet-exec"), "/usr/local/bin/minilet-exec"},
		{filepath.Join(root, "deploy/systemd/minilet.service"), "/etc/systemd/system/minilet.service"},
		{filepath.Join(root, "deploy/etc/config.yaml"), "/etc/minilet/config.yaml"},
		{cni, "/opt/cni/bin"},
	}
	if config != "" {
		f := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(f, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		copies[4][0] = f
	}
	for _, c := range copies {
		if err := n.CopyIn(ctx, c[0], c[1]); err != nil {
			t.Fatalf("installing minilet: %v", err)
		}
	}
	trimmed(ctx, t, n, "mkdir", "-p", "/etc/minilet/manifests")
	trimmed(ctx, t, n, "systemctl", "daemon-reload")
}

// unitProps reads properties of a unit with systemctl show.
func unitProps(ctx context.Context, t *testing.T, n *Node, unit string, props ...string) map[string]string {
	t.Helper()
	out := trimmed(ctx, t, n, "systemctl", "show", unit, "-p", strings.Join(props, ","))
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// writeManifest puts a static pod manifest into the node's manifest dir
// with one rename. Not CopyIn straight there: its temporary file
// (<name>.yaml.copy-in) would be read as a manifest of its own, and the
// rename would then replace that pod (a new UID, a Killing event).
func writeManifest(ctx context.Context, t *testing.T, n *Node, name, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	staged := "/etc/minilet/.staging/" + name + ".yaml" // same file system as the manifests
	if err := n.CopyIn(ctx, f, staged); err != nil {
		t.Fatal(err)
	}
	trimmed(ctx, t, n, "mv", staged, "/etc/minilet/manifests/"+name+".yaml")
}

// getPods lists the agent's pods with its own CLI inside the node.
func getPods(ctx context.Context, n *Node) ([]v1.Pod, error) {
	out, err := n.Run(ctx, "minilet", "get", "pods", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("minilet get pods -o json: %w: %.300s", err, out)
	}
	return list.Items, nil
}

// waitPod polls the agent's pods until the one named name satisfies ok.
func waitPod(ctx context.Context, t *testing.T, n *Node, name string, d time.Duration, ok func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var found *v1.Pod
	err := eventually(ctx, "pod "+name, func() (bool, string, error) {
		pods, err := getPods(ctx, n)
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range pods {
			if pods[i].Name == name {
				found = &pods[i]
				return ok(found), describePod(found), nil
			}
		}
		return false, fmt.Sprintf("%d pods, none named %s", len(pods), name), nil
	})
	if err != nil {
		t.Fatalf("%s: %v\njournal:\n%s", n.Name(), err, journalTail(n))
	}
	return found
}

func running(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

func describePod(p *v1.Pod) string {
	s := fmt.Sprintf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	for _, c := range p.Status.ContainerStatuses {
		b, _ := json.Marshal(c.State)
		s += fmt.Sprintf("; %s: %s restarts %d", c.Name, b, c.RestartCount)
	}
	return s
}

// journalTail is the end of the agent's journal, for failure messages.
func journalTail(n *Node) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := n.Run(ctx, "journalctl", "-u", "minilet", "-n", "40", "--no-pager", "-o", "json")
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		fmt.Fprintf(&b, "%v", e["MESSAGE"])
		keys := make([]string, 0, len(e))
		for k := range e {
			if k != "MESSAGE" && k != "SYSLOG_IDENTIFIER" && k != "PRIORITY" && !strings.HasPrefix(k, "_") && !strings.HasPrefix(k, "__") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%v", k, e[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// waitActive polls until the unit is active and running.
func waitActive(ctx context.Context, t *testing.T, n *Node, unit string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := eventually(ctx, unit+" active", func() (bool, string, error) {
		out, _ := n.Run(ctx, "systemctl", "show", unit, "-p", "ActiveState,SubState")
		s := strings.Join(strings.Fields(out), " ")
		return s == "ActiveState=active SubState=running", s, nil
	})
	if err != nil {
		t.Fatalf("%s: %v\njournal:\n%s", n.Name(), err, journalTail(n))
	}
}

// podProcesses lists the PIDs (as the node sees them) in the pod's memory
// cgroup and below, with their command names.
func podProcesses(ctx context.Context, t *testing.T, n *Node, uid string) map[string]string {
	t.Helper()
	script := `for f in $(find "/sys/fs/cgroup/memory/minilet/kubepods/pod$1" -name cgroup.procs); do
	for p in $(cat "$f"); do echo "$p $(cat /proc/$p/comm 2>/dev/null)"; done
done`
	out := trimmed(ctx, t, n, "sh", "-c", script, "procs", uid)
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if pid, comm, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			m[pid] = comm
		}
	}
	return m
}
