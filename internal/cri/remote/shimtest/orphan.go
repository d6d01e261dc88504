// Package shimtest makes real orphaned containerd shims for tests: shim
// daemons that serve nothing, as containerd 1.6 leaves behind when a
// RunPodSandbox is cancelled after it started the shim.
package shimtest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Binary is the runc shim containerd runs.
const Binary = "containerd-shim-runc-v2"

// Orphan is a shim daemon started by StartOrphan.
type Orphan struct {
	ID  string
	PID int
}

// StartOrphan starts a shim daemon of the containerd at address (a socket
// path; no containerd need listen there) in namespace, with no task: what
// "containerd-shim-runc-v2 ... start" leaves when its caller never
// connects. It skips the test when the shim binary is missing, and ends
// the shim (if still alive) and removes its socket when the test ends.
func StartOrphan(t testing.TB, address, namespace string) Orphan {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		t.Skipf("%s not installed", Binary)
	}
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The daemon writes its log to the fifo "log" of its bundle, which
	// containerd would read; without a reader it does not come up.
	logFifo := filepath.Join(bundle, "log")
	if err := syscall.Mkfifo(logFifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(logFifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Close() })
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := "orphan-" + hex.EncodeToString(b)
	cmd := exec.Command(bin, "-namespace", namespace, "-id", id, "-address", address, "start")
	cmd.Dir = bundle
	cmd.Env = append(os.Environ(), "TTRPC_ADDRESS="+address+".ttrpc")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s start: %v", Binary, err)
	}
	pid := daemonPID(id)
	if pid == 0 {
		t.Fatalf("%s start: no shim daemon %s runs", Binary, id)
	}
	t.Cleanup(func() {
		if Alive(pid, id) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = os.Remove(strings.TrimPrefix(strings.TrimSpace(string(out)), "unix://"))
	})
	return Orphan{ID: id, PID: pid}
}

// Alive reports whether pid is still a live (not zombie) process whose
// command line names id.
func Alive(pid int, id string) bool {
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmd), "\x00"+id+"\x00") {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] != 'Z'
}

// daemonPID finds the live shim daemon of id (0: none).
func daemonPID(id string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmd), "\x00"+id+"\x00") && !strings.HasSuffix(string(cmd), "\x00start\x00") {
			return pid
		}
	}
	return 0
}
