package remote

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestParseShim(t *testing.T) {
	for _, tc := range []struct {
		name, cmdline   string
		id, ns, address string
		ok              bool
	}{
		{"daemon", "/usr/bin/containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00-id\x00abc\x00-address\x00/run/containerd/containerd.sock\x00",
			"abc", "k8s.io", "/run/containerd/containerd.sock", true},
		{"flags with =", "containerd-shim-runc-v2\x00-namespace=k8s.io\x00--id=abc\x00-address=/x.sock\x00", "abc", "k8s.io", "/x.sock", true},
		{"start run", "containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00-id\x00abc\x00-address\x00/x.sock\x00start\x00", "", "", "", false},
		{"debug flag before the id", "containerd-shim-runc-v2\x00-debug\x00-namespace\x00k8s.io\x00-id\x00abc\x00-address\x00/x.sock\x00", "abc", "k8s.io", "/x.sock", true},
		{"no address", "containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00-id\x00abc\x00", "", "", "", false},
		{"another program", "/bin/sleep\x00-id\x00abc\x00", "", "", "", false},
		{"empty (a kernel thread)", "", "", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, ns, addr, ok := parseShim([]byte(tc.cmdline))
			if ok != tc.ok || (ok && (id != tc.id || ns != tc.ns || addr != tc.address)) {
				t.Errorf("parseShim(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tc.cmdline, id, ns, addr, ok, tc.id, tc.ns, tc.address, tc.ok)
			}
		})
	}
}

// fakeProc is a /proc with the given processes: pid → ppid, start
// ticks, command line.
type fakeProcess struct {
	ppid    int
	start   uint64
	state   byte
	cmdline string
}

func writeFakeProc(t *testing.T, uptime string, procs map[int]fakeProcess) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "uptime"), []byte(uptime), 0o600); err != nil {
		t.Fatal(err)
	}
	for pid, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		state := p.state
		if state == 0 {
			state = 'S'
		}
		// The command name holds ") (" on purpose: fields are counted
		// after its last parenthesis.
		stat := fmt.Sprintf("%d (odd) (name) %c %d 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, state, p.ppid, p.start)
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(p.cmdline), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func shimCmd(id, address string) string {
	return "/usr/bin/containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00-id\x00" + id + "\x00-address\x00" + address + "\x00"
}

func TestFindShimsSeesOnlyItsContainerdsDaemons(t *testing.T) {
	const ours, theirs = "/run/ours/containerd.sock", "/tmp/other/containerd.sock"
	proc := writeFakeProc(t, "1000.00 1900.00\n", map[int]fakeProcess{
		10: {ppid: 1, start: 10000, cmdline: shimCmd("sandbox", ours)},          // 900 s old, one child
		11: {ppid: 10, start: 10010, cmdline: "/pause\x00"},                     // sandbox's pause
		20: {ppid: 1, start: 99000, cmdline: shimCmd("lost", ours)},             // 10 s old, no child
		30: {ppid: 1, start: 50000, cmdline: shimCmd("other", theirs)},          // another containerd's
		40: {ppid: 1, start: 50000, cmdline: shimCmd("dead", ours), state: 'Z'}, // a zombie
		50: {ppid: 1, start: 50000, cmdline: shimCmd("starting", ours) + "start\x00"},
		60: {ppid: 1, start: 50000, cmdline: "/usr/bin/containerd-shim-runc-v2\x00-namespace\x00moby\x00-id\x00m\x00-address\x00" + ours + "\x00"},
	})
	got, err := findShims(proc, ours+"/", "k8s.io") // the address is compared cleaned
	if err != nil {
		t.Fatal(err)
	}
	want := []shimProc{
		{PID: 10, ID: "sandbox", Namespace: "k8s.io", Address: ours, StartTicks: 10000, Age: 900 * time.Second, Children: 1},
		{PID: 20, ID: "lost", Namespace: "k8s.io", Address: ours, StartTicks: 99000, Age: 10 * time.Second},
	}
	if len(got) == 2 && got[0].PID > got[1].PID {
		got[0], got[1] = got[1], got[0]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("findShims:\n got %+v\nwant %+v", got, want)
	}
}

func TestOrphanedPicksUnknownChildlessOldShims(t *testing.T) {
	shims := []shimProc{
		{PID: 1, ID: "known", Age: time.Hour},
		{PID: 2, ID: "busy", Age: time.Hour, Children: 1},
		{PID: 3, ID: "young", Age: time.Second},
		{PID: 4, ID: "lost", Age: time.Hour},
		{PID: 5, ID: "just old enough", Age: 30 * time.Second},
	}
	got := orphaned(shims, map[string]bool{"known": true}, 30*time.Second)
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if want := []string{"lost", "just old enough"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("orphaned: %v, want %v", ids, want)
	}
}

type noSandboxes struct{}

func (noSandboxes) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, nil
}

func (noSandboxes) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, nil
}

// A possible orphan too young to end is looked at again once it is old
// enough, not a whole period later.
func TestSweepComesBackWhenAYoungOrphanIsOldEnough(t *testing.T) {
	const ours = "/run/ours/containerd.sock"
	for _, tc := range []struct {
		name  string
		procs map[int]fakeProcess
		want  time.Duration
	}{
		{"none", map[int]fakeProcess{}, time.Minute},
		{"a sandbox's shim", map[int]fakeProcess{
			10: {ppid: 1, start: 99000, cmdline: shimCmd("sb", ours)},
			11: {ppid: 10, start: 99001, cmdline: "/pause\x00"},
		}, time.Minute},
		{"an orphan 10 s old", map[int]fakeProcess{
			20: {ppid: 1, start: 99000, cmdline: shimCmd("lost", ours)},
		}, 21 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := writeFakeProc(t, "1000.00 1900.00\n", tc.procs)
			r, err := NewShimReaper(ShimReaperConfig{Endpoint: ours, Runtime: noSandboxes{}, Proc: proc,
				MinAge: 30 * time.Second, Period: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ended, next, err := r.sweep(context.Background())
			if err != nil || len(ended) != 0 || next != tc.want {
				t.Errorf("sweep: ended %v, next %s, %v; want nothing ended, next %s", ended, next, err, tc.want)
			}
		})
	}
}
