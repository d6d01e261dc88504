package vm

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestVMBootsOnCgroupV2 proves the test bed in one boot: systemd is PID 1
// on the unified hierarchy alone, with the controllers minilet uses; a
// 200 MB hog under systemd-run -p MemoryMax=50M is OOM-killed and systemd
// knows it (on cgroup v1 it cannot: test/hosts); a file goes in and one
// comes out.
func TestVMBootsOnCgroupV2(t *testing.T) {
	in := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(in, []byte("from the host\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	script := `
echo "pid1=$(cat /proc/1/comm)"
echo "fstype=$(stat -fc %T /sys/fs/cgroup)"
echo "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
echo "state=$(systemctl is-system-running)"
echo "hello=$(cat /opt/in/hello) $(stat -c %a /opt/in/hello)"
# Killed by the kernel, the unit ends (OOMPolicy=stop, the default) and
# systemd says why.
systemd-run --wait --quiet --unit=hog -p MemoryMax=50M sh -c 'head -c 200M /dev/zero | tail'
echo "result=$(systemctl show -P Result hog.service)"
# With OOMPolicy=continue the unit's shell outlives the hog and reads the
# kernel's own count.
systemd-run --wait --pipe --quiet --unit=hog2 -p MemoryMax=50M -p OOMPolicy=continue sh -c '
	{ head -c 200M /dev/zero | tail; } 2>/dev/null; echo "status=$?"
	cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)
	echo "limit=$(cat $cg/memory.max)"
	sed -n "s/^oom_kill /oom_kill=/p" $cg/memory.events'
uname -r >"$OUT/kernel"
`
	res := Run(t, Job{Script: script, Files: map[string]string{in: "/opt/in/hello"}})
	t.Logf("script output:\n%s", res.Stdout)
	if res.ExitCode != 0 || res.Stderr != "" {
		t.Errorf("script exit code %d, stderr:\n%s", res.ExitCode, res.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(res.Stdout, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	for k, want := range map[string]string{
		"pid1":   "systemd",
		"fstype": "cgroup2fs",
		"hello":  "from the host 640",
		"status": "137", // the hog's tail, SIGKILLed
		"limit":  "52428800",
		"result": "oom-kill", // systemd read oom_kill from memory.events
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	ctrls := strings.Fields(got["controllers"])
	for _, c := range []string{"cpu", "memory", "pids", "io", "cpuset"} {
		if !contains(ctrls, c) {
			t.Errorf("cgroup.controllers = %q, want %s in it", got["controllers"], c)
		}
	}
	if got["state"] != "running" {
		t.Errorf("systemctl is-system-running = %q, want running", got["state"])
	}
	if n, err := strconv.Atoi(got["oom_kill"]); err != nil || n < 1 {
		t.Errorf("memory.events oom_kill = %q, want 1 or more", got["oom_kill"])
	}
	kernel, err := os.ReadFile(res.Files["kernel"])
	if err != nil {
		t.Fatalf("the file the job left in $OUT: %v (files: %v)", err, res.Files)
	}
	if !regexp.MustCompile(`^\d+\.\d+.*-cloud-amd64\n$`).Match(kernel) {
		t.Errorf("guest kernel = %q, want Debian's cloud kernel", kernel)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
