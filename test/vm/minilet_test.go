package vm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// qosPods are one pod per QoS class, and one whose container outgrows its
// memory limit. All on the host's network: the guest has no CNI plugins.
var qosPods = map[string]string{
	"guaranteed": `apiVersion: v1
kind: Pod
metadata: {name: guaranteed}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "while true; do sleep 1; done"]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: 100m, memory: 64Mi}
`,
	"burstable": `apiVersion: v1
kind: Pod
metadata: {name: burstable}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "while true; do sleep 1; done"]
    resources:
      requests: {cpu: 50m, memory: 32Mi}
      limits: {cpu: 200m, memory: 96Mi}
`,
	"besteffort": `apiVersion: v1
kind: Pod
metadata: {name: besteffort}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "while true; do sleep 1; done"]
`,
	"hog": `apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "head -c 300M /dev/zero | tail"]
    resources:
      limits: {memory: 32Mi}
`,
}

// TestMiniletOnCgroupV2 runs the agent (embedded runtime, cgroupfs driver)
// on a host whose only cgroup hierarchy is v2, with systemd as PID 1, and
// reads what it wrote: each QoS class's pod cgroup with the kubelet's v2
// values (cpu.weight from shares by the kubelet's conversion, cpu.max,
// memory.max), and a container killed by the kernel for its memory limit
// reported OOMKilled.
func TestMiniletOnCgroupV2(t *testing.T) {
	bin := filepath.Dir(harness.Binary(t))
	manifests := t.TempDir()
	for name, m := range qosPods {
		if err := os.WriteFile(filepath.Join(manifests, name+".yaml"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `
export PATH=/usr/local/bin:$PATH
# The minbase image has no /etc/hosts (no netbase); every real host does,
# and a host-network pod gets the node's, as under the kubelet.
[ -e /etc/hosts ] || printf '127.0.0.1 localhost\n::1 localhost\n' >/etc/hosts
minilet run --pod-manifest-path /etc/minilet/manifests --hostname-override v2 --port 0 --read-only-port 0 >"$OUT/agent.log" 2>&1 &
agent=$!
start=$(date +%s)
ok=
while [ $(($(date +%s) - start)) -lt 240 ]; do
	minilet get pods -o json >"$OUT/pods.json" 2>/dev/null
	if [ "$(grep -c '"phase": "Running"' "$OUT/pods.json")" -ge 3 ] && grep -q OOMKilled "$OUT/pods.json"; then ok=1; break; fi
	sleep 1
done
echo "ready=${ok:-no} after $(($(date +%s) - start))s"
find /sys/fs/cgroup/minilet -type d | while read -r d; do
	for f in cpu.weight cpu.max memory.max memory.oom.group pids.max; do
		[ -f "$d/$f" ] && echo "$d $f $(cat "$d/$f")"
	done
done >"$OUT/cgroups.txt"
kill $agent; wait $agent
`
	files := map[string]string{manifests: "/etc/minilet/manifests"}
	for _, b := range []string{"minilet", "minilet-monitor", "minilet-exec"} {
		files[filepath.Join(bin, b)] = "/usr/local/bin/" + b
	}
	start := time.Now()
	res := Run(t, Job{Script: script, Files: files, Timeout: 7 * time.Minute})
	t.Logf("boot, agent, four pods and power-off in %s; script output:\n%s%s", time.Since(start).Round(time.Second), res.Stdout, res.Stderr)
	agentLog, _ := os.ReadFile(res.Files["agent.log"])
	if !strings.Contains(res.Stdout, "ready=1") {
		t.Fatalf("the pods did not reach their states; agent log:\n%s\npods:\n%s", tail(agentLog, 60), readOut(res, "pods.json"))
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(readOut(res, "pods.json")), &list); err != nil {
		t.Fatal(err)
	}
	uid := map[string]string{}
	for _, p := range list.Items {
		uid[strings.TrimSuffix(p.Name, "-v2")] = string(p.UID)
		if p.Name == "hog-v2" {
			st := p.Status.ContainerStatuses[0].State.Terminated
			if st == nil || st.Reason != "OOMKilled" || st.ExitCode != 137 {
				t.Errorf("hog's container ended %+v, want OOMKilled, exit code 137", st)
			}
		}
	}
	values := map[string]string{} // "<dir> <file>" → value
	for _, l := range strings.Split(readOut(res, "cgroups.txt"), "\n") {
		f := strings.SplitN(l, " ", 3)
		if len(f) == 3 {
			values[f[0]+" "+f[1]] = f[2]
		}
	}
	const kubepods = "/sys/fs/cgroup/minilet/kubepods"
	for _, c := range []struct{ dir, file, want string }{
		// requests = limits 100m, 64Mi: shares 102 → weight 4; quota 10 ms per 100 ms.
		{kubepods + "/pod" + uid["guaranteed"], "cpu.weight", "4"},
		{kubepods + "/pod" + uid["guaranteed"], "cpu.max", "10000 100000"},
		{kubepods + "/pod" + uid["guaranteed"], "memory.max", "67108864"},
		// requests 50m (shares 51 → weight 2), limits 200m and 96Mi.
		{kubepods + "/burstable/pod" + uid["burstable"], "cpu.weight", "2"},
		{kubepods + "/burstable/pod" + uid["burstable"], "cpu.max", "20000 100000"},
		{kubepods + "/burstable/pod" + uid["burstable"], "memory.max", "100663296"},
		// no requests: shares 2 → weight 1, no limits.
		{kubepods + "/besteffort/pod" + uid["besteffort"], "cpu.weight", "1"},
		{kubepods + "/besteffort/pod" + uid["besteffort"], "cpu.max", "max 100000"},
		{kubepods + "/besteffort/pod" + uid["besteffort"], "memory.max", "max"},
		{kubepods + "/besteffort", "cpu.weight", "1"},
	} {
		if got := values[c.dir+" "+c.file]; got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.dir, c.file, got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("cgroup files:\n%s\nagent log:\n%s", readOut(res, "cgroups.txt"), tail(agentLog, 40))
	}
}

func readOut(res Result, name string) string {
	b, err := os.ReadFile(res.Files[name])
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	return string(b)
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
