package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// messagePod is a pod of one container "a" with the kubelet's default
// termination message path and the given policy.
func messagePod(policy v1.TerminationMessagePolicy) *v1.Pod {
	pod := mkPod(v1.RestartPolicyNever, nil, "a")
	pod.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	pod.Spec.Containers[0].TerminationMessagePolicy = policy
	return pod
}

// startWithMessageFile syncs the pod and returns the host file its
// container got for its termination message. The fake runtime keeps no
// mounts, so the test gives the container the one a real runtime reports.
func (e *env) startWithMessageFile(pod *v1.Pod) (id, host string) {
	e.t.Helper()
	if res := e.sync(pod); res.Err != nil {
		e.t.Fatal(res.Err)
	}
	files, _ := filepath.Glob(filepath.Join(e.cfg.PodsDir, string(pod.UID), "containers", "a", "*"))
	if len(files) != 1 {
		e.t.Fatalf("termination message files = %v, want one", files)
	}
	id = e.status(pod).ps.FindContainer("a").ID.ID
	e.rt.Lock()
	e.rt.Containers[id].Mounts = []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: files[0]}}
	e.rt.Unlock()
	return id, files[0]
}

func (e *env) message(pod *v1.Pod) string {
	e.t.Helper()
	return e.status(pod).ps.FindContainer("a").Message
}

func TestTerminationMessageFile(t *testing.T) {
	e := newEnv(t)
	pod := messagePod(v1.TerminationMessageReadFile)
	_, host := e.startWithMessageFile(pod)

	// Each start gets a fresh file anyone may write, mounted at the path.
	cfg, err := e.m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], 1, "")
	if err != nil {
		t.Fatal(err)
	}
	last := cfg.Mounts[len(cfg.Mounts)-1]
	if last.ContainerPath != "/dev/termination-log" || last.HostPath == host || filepath.Dir(last.HostPath) != filepath.Dir(host) {
		t.Fatalf("mount = %+v, want a new file next to %s", last, host)
	}
	if st, err := os.Stat(host); err != nil || st.Mode().Perm() != 0o666 || st.Size() != 0 {
		t.Fatalf("message file: %v %v", st, err)
	}
	if cfg.Annotations[annotationTermMsgPath] != "/dev/termination-log" || cfg.Annotations[annotationTermMsgPolicy] != "File" {
		t.Fatalf("annotations = %v", cfg.Annotations)
	}

	// Running: no message yet. Exited: what the file holds.
	if err := os.WriteFile(host, []byte("bye"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := e.message(pod); got != "" {
		t.Fatalf("message of a running container = %q", got)
	}
	e.exit(pod, "a", 3)
	if got := e.message(pod); got != "bye" {
		t.Fatalf("message = %q, want bye", got)
	}
}

// A message longer than 4 KiB keeps its end, as the kubelet reads it.
func TestTerminationMessageKeepsTheLast4KiB(t *testing.T) {
	e := newEnv(t)
	pod := messagePod(v1.TerminationMessageReadFile)
	_, host := e.startWithMessageFile(pod)
	long := strings.Repeat("a", 1000) + strings.Repeat("b", 4096)
	if err := os.WriteFile(host, []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	e.exit(pod, "a", 1)
	if got := e.message(pod); got != strings.Repeat("b", 4096) {
		t.Fatalf("message: %d bytes starting %q, want the last 4096", len(got), got[:min(10, len(got))])
	}
}

// FallbackToLogsOnError: an empty message of a failed container is the
// end of its log (80 lines, 2 KiB); a success, or the File policy, leaves
// it empty.
func TestTerminationMessageFallbackToLogs(t *testing.T) {
	writeLog := func(t *testing.T, e *env, id string, lines int, pad string) {
		t.Helper()
		var b strings.Builder
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&b, "2026-01-02T03:04:05.000000000Z stdout F line %d%s\n", i, pad)
		}
		path := filepath.Join(t.TempDir(), "0.log")
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		e.rt.Lock()
		e.rt.Containers[id].LogPath = path
		e.rt.Unlock()
	}
	for _, tc := range []struct {
		name   string
		policy v1.TerminationMessagePolicy
		exit   int32
		lines  int
		pad    string
		want   string
	}{
		{"failed", v1.TerminationMessageFallbackToLogsOnError, 1, 3, "", "line 1\nline 2\nline 3\n"},
		{"last 80 lines", v1.TerminationMessageFallbackToLogsOnError, 1, 100, "", tailLines(21, 100, "")},
		{"last 2KiB", v1.TerminationMessageFallbackToLogsOnError, 1, 100, pad40, lastN(tailLines(21, 100, pad40), 2048)},
		{"succeeded", v1.TerminationMessageFallbackToLogsOnError, 0, 3, "", ""},
		{"file policy", v1.TerminationMessageReadFile, 1, 3, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			pod := messagePod(tc.policy)
			id, _ := e.startWithMessageFile(pod)
			writeLog(t, e, id, tc.lines, tc.pad)
			e.exit(pod, "a", tc.exit)
			if got := e.message(pod); got != tc.want {
				t.Fatalf("message = %q, want %q", got, tc.want)
			}
		})
	}

	// What the file says wins over the log.
	e := newEnv(t)
	pod := messagePod(v1.TerminationMessageFallbackToLogsOnError)
	id, host := e.startWithMessageFile(pod)
	writeLog(t, e, id, 3, "")
	if err := os.WriteFile(host, []byte("bye"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.exit(pod, "a", 1)
	if got := e.message(pod); got != "bye" {
		t.Fatalf("message = %q, want the file's bye", got)
	}
}

// A failed container whose last output has no newline (`echo -n DONE;
// false`): the runtime logs it as a partial line, and the message is that
// output as it is, without a newline added (upstream's conformance spec
// "termination message from log output").
func TestTerminationMessageFromLogsEndingWithoutNewline(t *testing.T) {
	e := newEnv(t)
	pod := messagePod(v1.TerminationMessageFallbackToLogsOnError)
	id, _ := e.startWithMessageFile(pod)
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte("2026-01-02T03:04:05.000000000Z stdout P DONE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.rt.Lock()
	e.rt.Containers[id].LogPath = path
	e.rt.Unlock()
	e.exit(pod, "a", 1)
	if got := e.message(pod); got != "DONE" {
		t.Fatalf("message = %q, want %q", got, "DONE")
	}
}

var pad40 = strings.Repeat(".", 40)

func tailLines(from, to int, pad string) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d%s\n", i, pad)
	}
	return b.String()
}

func lastN(s string, n int) string { return s[len(s)-n:] }

// A gone pod's termination message files go with its containers.
func TestGCRemovesTerminationMessageFiles(t *testing.T) {
	e := newEnv(t)
	pod := messagePod(v1.TerminationMessageReadFile)
	e.startWithMessageFile(pod)
	e.exit(pod, "a", 0)
	if err := e.m.KillPod(context.Background(), pod, e.status(pod).ps, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.m.GarbageCollect(context.Background(), 1, func(types.UID) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.PodsDir, string(pod.UID), "containers")); !os.IsNotExist(err) {
		t.Fatalf("containers directory of a gone pod: %v", err)
	}
}

// A gone pod's directory goes once it is empty (its etc-hosts aside);
// one still holding something its owner has not cleaned up stays, as do
// live pods' directories.
func TestGCRemovesEmptyPodDirs(t *testing.T) {
	e := newEnv(t)
	pod := messagePod(v1.TerminationMessageReadFile)
	e.startWithMessageFile(pod)
	e.exit(pod, "a", 0)
	if err := e.m.KillPod(context.Background(), pod, e.status(pod).ps, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.cfg.PodsDir, string(pod.UID))
	other := filepath.Join(e.cfg.PodsDir, "other-gone")   // still has a status to be removed by its owner
	alive := filepath.Join(e.cfg.PodsDir, "alive")        // a pod being set up
	emptyGone := filepath.Join(e.cfg.PodsDir, "old-gone") // left empty by an earlier run
	for _, d := range []string{dir, other, alive, emptyGone} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc-hosts"), []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "status.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	gone := func(uid types.UID) bool { return uid != "alive" }
	if err := e.m.GarbageCollect(context.Background(), 1, gone); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, emptyGone} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s of a gone pod still there: %v", d, err)
		}
	}
	for _, d := range []string{other, alive} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}
