package kuberuntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/logs"
)

// The kubelet's limits on a container's termination message: what it
// reads of the file (the end of it), and of the log when the policy falls
// back to it. The pod-wide cap (12 KiB shared by its containers) is
// status generation's (internal/status).
const (
	maxTerminationMessage = 4 * 1024
	maxMessageLogLines    = 80
	maxMessageLogBytes    = 2 * 1024
)

// reasonContainerCannotRun is the exit reason of a container that never
// ran: it has no log to fall back to.
const reasonContainerCannotRun = "ContainerCannotRun"

// terminationMessageMount creates the host file a new container of c
// writes its termination message to, PodsDir/<uid>/containers/<name>/<id>
// (a fresh one for every attempt), and returns the mount that puts it at
// the container's terminationMessagePath. Nil when c has no path or the
// file cannot be made: the container then starts without it, as the
// kubelet's does.
func (m *Manager) terminationMessageMount(pod *v1.Pod, c *v1.Container) *runtimeapi.Mount {
	if m.cfg.PodsDir == "" || c.TerminationMessagePath == "" {
		return nil
	}
	host, err := m.newTerminationMessageFile(pod, c.Name)
	if err != nil {
		m.log.Warn("container starts without a termination message file", "pod", podDesc(pod), "container", c.Name, "err", err)
		return nil
	}
	return &runtimeapi.Mount{HostPath: host, ContainerPath: c.TerminationMessagePath}
}

func (m *Manager) newTerminationMessageFile(pod *v1.Pod, name string) (string, error) {
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("termination message file id: %w", err)
	}
	dir := filepath.Join(m.cfg.PodsDir, string(pod.UID), "containers", name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("termination message directory: %w", err)
	}
	path := filepath.Join(dir, hex.EncodeToString(id[:]))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return "", fmt.Errorf("termination message file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("termination message file: %w", err)
	}
	// Any user the container runs as may write it, whatever the umask.
	if err := os.Chmod(path, 0o666); err != nil { //nolint:gosec // the container's user is unknown here
		return "", fmt.Errorf("termination message file: %w", err)
	}
	return path, nil
}

// terminationMessage is what an exited container left as its message: the
// end of the file mounted at its terminationMessagePath, or with
// FallbackToLogsOnError, when that is empty and the container failed, the
// end of its log. An exited container's message never changes, so it is
// read once per container (a failed read is tried again next time).
func (m *Manager) terminationMessage(s *runtimeapi.ContainerStatus) string {
	m.msgMu.Lock()
	msg, ok := m.msgs[s.GetId()]
	m.msgMu.Unlock()
	if ok {
		return msg
	}
	msg, err := readTerminationMessage(s)
	if err != nil {
		return err.Error()
	}
	m.msgMu.Lock()
	m.msgs[s.GetId()] = msg
	m.msgMu.Unlock()
	return msg
}

// forgetTerminationMessage drops what terminationMessage kept of a
// removed container.
func (m *Manager) forgetTerminationMessage(id string) {
	m.msgMu.Lock()
	delete(m.msgs, id)
	m.msgMu.Unlock()
}

// readTerminationMessage reads an exited container's message; an error
// is worded as the message the kubelet shows for it.
func readTerminationMessage(s *runtimeapi.ContainerStatus) (string, error) {
	a := s.GetAnnotations()
	if msg, err := messageFile(s.GetMounts(), a[annotationTermMsgPath]); msg != "" || err != nil {
		return msg, err
	}
	fallback := v1.TerminationMessagePolicy(a[annotationTermMsgPolicy]) == v1.TerminationMessageFallbackToLogsOnError &&
		s.GetExitCode() != 0 && s.GetReason() != reasonContainerCannotRun
	if !fallback || s.GetLogPath() == "" {
		return "", nil
	}
	buf := &lastBytes{max: maxMessageLogBytes}
	opts := logs.Options{TailLines: logs.Tail(maxMessageLogLines)}
	if err := logs.ReadLogs(context.Background(), s.GetLogPath(), opts, buf); err != nil {
		return "", fmt.Errorf("Error on reading termination message from logs: %w", err) //nolint:staticcheck // the kubelet's wording, shown as the message
	}
	return string(buf.b), nil
}

// messageFile reads the end of the host file mounted at the container's
// terminationMessagePath; a container without one (or whose file is gone)
// has no message there.
func messageFile(mounts []*runtimeapi.Mount, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	for _, mnt := range mounts {
		if mnt.GetContainerPath() != path {
			continue
		}
		b, err := readTail(mnt.GetHostPath(), maxTerminationMessage)
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("Error on reading termination log %s: %w", mnt.GetHostPath(), err) //nolint:staticcheck // the kubelet's wording, shown as the message
		}
		return string(b), nil
	}
	return "", nil
}

// readTail returns the last max bytes of the file at path.
func readTail(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		if _, err := f.Seek(st.Size()-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// lastBytes is a writer that keeps the last max bytes written to it.
type lastBytes struct {
	max int
	b   []byte
}

func (w *lastBytes) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= w.max {
		w.b = append(w.b[:0], p[len(p)-w.max:]...)
		return n, nil
	}
	if over := len(w.b) + len(p) - w.max; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	w.b = append(w.b, p...)
	return n, nil
}
