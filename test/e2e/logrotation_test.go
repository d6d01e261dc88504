package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/test/harness"
)

// withKubeletConfig makes a start with a KubeletConfiguration file holding
// fields (YAML lines).
func withKubeletConfig(t *testing.T, a *harness.Agent, fields string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+fields), 0o644); err != nil {
		t.Fatal(err)
	}
	a.ExtraArgs = append(a.ExtraArgs, "--config", path)
}

// Log rotation as the kubelet's, on both runtimes: a container writing
// fast under containerLogMaxSize 4Ki and containerLogMaxFiles 3 keeps a
// bounded current file and at most three files, the older rotated ones
// gzipped, and `logs -f` keeps receiving its lines across rotations.
func TestContainerLogRotationOnBothRuntimes(t *testing.T) {
	const cfg = "containerLogMaxSize: 4Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n"
	t.Run("embedded", func(t *testing.T) {
		requireRoot(t)
		a := harness.New(t)
		withKubeletConfig(t, a, cfg)
		a.Start()
		logRotationScenario(t, a, "host")
	})
	t.Run("containerd", func(t *testing.T) {
		requireRoot(t)
		harness.ContainerdEndpoint(t)
		a := harness.New(t)
		a.UseContainerd()
		withKubeletConfig(t, a, cfg)
		a.Start()
		logRotationScenario(t, a, harness.BusyboxImage)
	})
}

// logState is what the test sees of a container's log directory at one
// moment.
type logState struct {
	current    int64    // size of 0.log; -1 while it is missing
	stamps     []string // rotation times, oldest first
	compressed map[string]bool
}

func readLogDir(t *testing.T, dir string) logState {
	t.Helper()
	st := logState{current: -1, compressed: map[string]bool{}}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range es {
		name := e.Name()
		if name == "0.log" {
			if fi, err := e.Info(); err == nil {
				st.current = fi.Size()
			}
			continue
		}
		rest, ok := strings.CutPrefix(name, "0.log.")
		if !ok {
			continue
		}
		stamp, _, _ := strings.Cut(rest, ".")
		if !seen[stamp] {
			seen[stamp] = true
			st.stamps = append(st.stamps, stamp)
		}
		if strings.HasSuffix(name, ".gz") {
			st.compressed[stamp] = true
		}
	}
	sort.Strings(st.stamps)
	return st
}

func (s logState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "current %d bytes, rotated:", s.current)
	for _, st := range s.stamps {
		fmt.Fprintf(&b, " %s(gz=%v)", st, s.compressed[st])
	}
	return b.String()
}

// lineNumbers returns the numbers of the writer's lines in CRI log data
// ("TIME stdout F line N ...").
func lineNumbers(data []byte) []int {
	var out []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "line" {
				if n, err := strconv.Atoi(f[i+1]); err == nil {
					out = append(out, n)
				}
				break
			}
		}
	}
	return out
}

func logRotationScenario(t *testing.T, a *harness.Agent, image string) {
	// About 40 lines of 100 bytes every 0.1 s: many times the 4 KiB limit
	// between two checks.
	a.WriteManifest("chatty.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: chatty}
spec:
  containers:
  - name: writer
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "i=0; while true; do j=0; while [ $j -lt 40 ]; do i=$((i+1)); j=$((j+1)); echo \"line $i 0123456789012345678901234567890123456789\"; done; sleep 0.1; done"]
`, image))
	name := a.Static("chatty")
	var uid string
	a.Eventually("chatty running", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "writer")
		uid = string(p.UID)
		return ok && s.State.Running != nil, describe(p, ok)
	})
	dir := filepath.Join(a.RootDir, "logs", fmt.Sprintf("default_%s_%s", name, uid), "writer")

	// Follow from the start; a start that lands in the moment between a
	// rename and the reopen finds no file and is tried again.
	var follow *harness.Output
	var fcmd *exec.Cmd
	a.Eventually("logs -f streaming", func() (bool, string) {
		if fcmd != nil {
			_ = fcmd.Process.Kill()
			_ = fcmd.Wait()
		}
		follow = &harness.Output{}
		fcmd = a.CLICommand("logs", "-f", name, "-c", "writer")
		fcmd.Stdout, fcmd.Stderr = follow, follow
		if err := fcmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = fcmd.Wait(); close(exited) }()
		ok := false
		harness.Eventually(t, "logs -f prints or exits", func() (bool, string) {
			select {
			case <-exited:
				return true, ""
			default:
			}
			ok = strings.Contains(follow.String(), "line ")
			return ok, follow.String()
		})
		if !ok {
			fcmd = nil // exited and waited for
		}
		return ok, follow.String()
	})
	t.Cleanup(func() { _ = fcmd.Process.Kill() })

	// Every look at the directory must find the policy kept: at most 3
	// files (rotations in progress included), and a current file bounded
	// by what the writer adds between two checks, with a wide margin.
	const limit, bound = 4 << 10, 64 * (4 << 10)
	var maxCurrent int64
	check := func() logState {
		st := readLogDir(t, dir)
		if len(st.stamps) > 2 {
			t.Fatalf("%d rotated files besides the current one, want at most 2: %s", len(st.stamps), st)
		}
		maxCurrent = max(maxCurrent, st.current)
		if st.current > bound {
			t.Fatalf("current log file %d bytes under a %d-byte limit: not rotated", st.current, limit)
		}
		return st
	}

	// Two rotations, the older one compressed; read the lines the newest
	// rotated file ends with.
	var lastRotated int
	var state logState
	a.Eventually("two rotated files, the older gzipped", func() (bool, string) {
		state = check()
		if len(state.stamps) != 2 || !state.compressed[state.stamps[0]] || state.compressed[state.stamps[1]] {
			return false, state.String()
		}
		old, err := readMaybeGzipped(filepath.Join(dir, "0.log."+state.stamps[0]+".gz"))
		if err != nil {
			return false, err.Error()
		}
		newer, err := os.ReadFile(filepath.Join(dir, "0.log."+state.stamps[1]))
		if err != nil {
			return false, err.Error() // compressed meanwhile: look again
		}
		on, nn := lineNumbers(old), lineNumbers(newer)
		if len(on) == 0 || len(nn) == 0 || on[len(on)-1]+1 != nn[0] {
			t.Fatalf("rotated files do not continue each other: %v..%v then %v..%v", on[:min(1, len(on))], on[max(len(on)-1, 0):], nn[:1], nn[len(nn)-1:])
		}
		lastRotated = nn[len(nn)-1]
		return true, ""
	})

	// The writer goes on through more rotations; the follower with it.
	written := func() int {
		ns := lineNumbers([]byte(follow.String()))
		if len(ns) == 0 {
			return 0
		}
		return ns[len(ns)-1]
	}
	first := state.stamps[1]
	a.Eventually("logs -f past more rotations and 1 MiB written", func() (bool, string) {
		st := check()
		more := len(st.stamps) > 0 && st.stamps[0] > first
		// ~100 bytes a line: 12000 lines are over 1 MiB, four times the
		// bound, so an unrotated file would have broken it.
		n := written()
		return more && n > lastRotated && n > 12000, fmt.Sprintf("%s; logs -f at line %d (rotated file ended at %d)", st, n, lastRotated)
	})
	ns := lineNumbers([]byte(follow.String()))
	gaps := 0
	for i := 1; i < len(ns); i++ {
		if ns[i] <= ns[i-1] {
			t.Fatalf("logs -f went back from line %d to %d", ns[i-1], ns[i])
		}
		if ns[i] != ns[i-1]+1 {
			gaps++
		}
	}
	t.Logf("logs -f: %d lines through rotations, %d gaps; largest current file seen %d bytes", len(ns), gaps, maxCurrent)

	// Plain `logs` reads the current file.
	a.Eventually("logs prints the current file", func() (bool, string) {
		out, err := a.CLI("logs", name, "-c", "writer")
		got := lineNumbers([]byte(out))
		return err == nil && len(got) > 0 && got[0] > lastRotated, fmt.Sprintf("%v: %d lines", err, len(got))
	})

	// The pod goes, and its logs with it.
	a.RemoveManifest("chatty.yaml")
	// (Container GC, which removes it, runs every minute.)
	harness.EventuallyWithin(t, 3*time.Minute, "chatty gone with its log directory", func() (bool, string) {
		_, ok := a.Pod(name)
		_, err := os.Stat(filepath.Dir(dir))
		return !ok && os.IsNotExist(err), fmt.Sprint(ok, err)
	})
}

func readMaybeGzipped(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(path, ".gz") {
		return data, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
