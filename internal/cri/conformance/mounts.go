package conformance

import (
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testFileMount: a host file bound at a path where the container has no
// file (the kubelet's termination message at /dev/termination-log) takes
// what the container writes there, and the container's status reports the
// mount, by which the kubelet finds the host file again.
func (s *suite) testFileMount(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	host := filepath.Join(t.TempDir(), "message")
	if err := os.WriteFile(host, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(host, 0o666); err != nil { //nolint:gosec // as the kubelet makes it: any container user writes it
		t.Fatal(err)
	}
	cfg := s.containerConfig("writer", "/bin/sh", "-c", "printf bye > /dev/termination-log; exit 3")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: host}}
	id := s.run(t, rt, p, cfg)
	st := waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if st.GetExitCode() != 3 {
		t.Errorf("exit code %d, want 3 (reason %q, message %q)", st.GetExitCode(), st.GetReason(), st.GetMessage())
	}
	if b, err := os.ReadFile(host); err != nil || string(b) != "bye" {
		t.Errorf("host file holds %q (%v), want bye", b, err)
	}
	found := false
	for _, m := range st.GetMounts() {
		if m.GetContainerPath() == "/dev/termination-log" && m.GetHostPath() == host {
			found = true
		}
	}
	if !found {
		t.Errorf("status mounts %v do not report /dev/termination-log from %s", st.GetMounts(), host)
	}
}
