package conformance

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
)

func (s *suite) testLifecycle(t *testing.T) {
	ctx := context.Background()
	rt := s.runtime(t)
	p := s.newPod(t, rt, map[string]string{"app": "lifecycle"})

	sb, err := rt.PodSandboxStatus(ctx, p.id, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if sb.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("new sandbox state = %v, want READY", sb.GetStatus().GetState())
	}
	if sb.GetStatus().GetNetwork().GetIp() == "" {
		t.Errorf("sandbox has no IP")
	}
	if got := sb.GetStatus().GetMetadata().GetUid(); got != p.config.GetMetadata().GetUid() {
		t.Errorf("sandbox uid = %q, want %q", got, p.config.GetMetadata().GetUid())
	}
	if sb.GetStatus().GetLabels()["app"] != "lifecycle" {
		t.Errorf("sandbox labels = %v, want app=lifecycle", sb.GetStatus().GetLabels())
	}

	id := s.create(t, rt, p, s.containerConfig("main", "sleep", "1000"))
	if st := status(t, rt, id); st.GetState() != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("state after create = %v, want CREATED", st.GetState())
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	st := status(t, rt, id)
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("state after start = %v, want RUNNING", st.GetState())
	}
	if st.GetStartedAt() == 0 || st.GetCreatedAt() == 0 {
		t.Errorf("created/started = %d/%d, want both set", st.GetCreatedAt(), st.GetStartedAt())
	}
	if err := rt.StartContainer(ctx, id); err == nil {
		t.Errorf("starting a running container succeeded, want an error")
	}

	// Stopping the sandbox kills what still runs.
	if err := rt.StopPodSandbox(ctx, p.id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	st = waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if st.GetFinishedAt() < st.GetStartedAt() {
		t.Errorf("finishedAt %d before startedAt %d", st.GetFinishedAt(), st.GetStartedAt())
	}
	sb, err = rt.PodSandboxStatus(ctx, p.id, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus after stop: %v", err)
	}
	if sb.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("stopped sandbox state = %v, want NOTREADY", sb.GetStatus().GetState())
	}
	if err := rt.StopPodSandbox(ctx, p.id); err != nil {
		t.Errorf("second StopPodSandbox: %v (want idempotent)", err)
	}

	if err := rt.RemoveContainer(ctx, id); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := rt.ContainerStatus(ctx, id, false); !crierrors.IsNotFound(err) {
		t.Errorf("ContainerStatus of removed container: err = %v, want NotFound", err)
	}
	if err := rt.RemoveContainer(ctx, id); err != nil {
		t.Errorf("second RemoveContainer: %v (want idempotent)", err)
	}
	if err := rt.RemovePodSandbox(ctx, p.id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if _, err := rt.PodSandboxStatus(ctx, p.id, false); !crierrors.IsNotFound(err) {
		t.Errorf("PodSandboxStatus of removed sandbox: err = %v, want NotFound", err)
	}
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: p.id})
	if err != nil || len(list) != 0 {
		t.Errorf("ListPodSandbox of removed sandbox = %v, %v; want empty", list, err)
	}
	if _, err := rt.ContainerStatus(ctx, "no-such-container", false); !crierrors.IsNotFound(err) {
		t.Errorf("ContainerStatus of unknown id: err = %v, want NotFound", err)
	}
}

func (s *suite) testExitCodes(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	for _, tc := range []struct {
		name   string
		script string
		code   int32
		reason string
	}{
		{"ok", "exit 0", 0, "Completed"},
		{"fail", "exit 3", 3, "Error"},
		{"killed", "kill -KILL $$", 137, "Error"},
	} {
		id := s.run(t, rt, p, s.containerConfig(tc.name, "/bin/sh", "-c", tc.script))
		st := waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
		if st.GetExitCode() != tc.code || st.GetReason() != tc.reason {
			t.Errorf("%s: exit code %d reason %q, want %d %q", tc.name, st.GetExitCode(), st.GetReason(), tc.code, tc.reason)
		}
		if st.GetFinishedAt() == 0 || st.GetFinishedAt() < st.GetStartedAt() {
			t.Errorf("%s: started %d finished %d", tc.name, st.GetStartedAt(), st.GetFinishedAt())
		}
	}
}

func (s *suite) testLogs(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	script := "echo hello; echo oops >&2; printf 'no newline'; echo; python3 -c \"print('x'*40000)\"; printf 'tail'"
	id := s.run(t, rt, p, s.containerConfig("logger", "/bin/sh", "-c", script))
	st := waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if want := filepath.Join(p.logDir, "logger", "0.log"); st.GetLogPath() != want {
		t.Errorf("LogPath = %q, want %q", st.GetLogPath(), want)
	}
	lines := readLog(t, st.GetLogPath())
	stdout := logText(lines, "stdout")
	want := []string{"hello", "no newline", strings.Repeat("x", 40000), "tail"}
	if len(stdout) != len(want) {
		t.Fatalf("stdout has %d lines, want %d: %.200q", len(stdout), len(want), stdout)
	}
	for i := range want {
		if stdout[i] != want[i] {
			t.Errorf("stdout line %d = %.80q, want %.80q", i, stdout[i], want[i])
		}
	}
	if got := logText(lines, "stderr"); len(got) != 1 || got[0] != "oops" {
		t.Errorf("stderr = %q, want [oops]", got)
	}
	partial := 0
	for _, l := range lines {
		if l.tag == "P" {
			partial++
		}
	}
	if partial == 0 {
		t.Errorf("a 40000-byte line was written without partial (P) lines")
	}
	// The last output without a newline stays partial: readers (the
	// kubelet's, kubectl logs) give it back without a newline.
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].stream == "stdout" {
			if lines[i].tag != "P" || lines[i].content != "tail" {
				t.Errorf("last stdout line = %s %q, want P %q (output that ends without a newline)", lines[i].tag, lines[i].content, "tail")
			}
			break
		}
	}
	for i := 1; i < len(lines); i++ {
		if lines[i].stream == lines[i-1].stream && lines[i].time.Before(lines[i-1].time) {
			t.Errorf("log timestamps go backwards at line %d", i)
		}
	}
}

func (s *suite) testStopWithGrace(t *testing.T) {
	ctx := context.Background()
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	// Ignores SIGTERM (and so does its sleep): only SIGKILL ends it.
	id := s.run(t, rt, p, s.containerConfig("stubborn", "/bin/sh", "-c", `trap "" TERM; echo ready; while true; do sleep 1; done`))
	waitLog(t, status(t, rt, id).GetLogPath(), "ready")
	if err := rt.StopContainer(ctx, id, 1); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	st := status(t, rt, id)
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("state after StopContainer returned = %v, want EXITED", st.GetState())
	}
	if st.GetExitCode() != 137 {
		t.Errorf("exit code = %d, want 137 (SIGKILL after the grace period)", st.GetExitCode())
	}
	if err := rt.StopContainer(ctx, id, 1); err != nil {
		t.Errorf("stopping an exited container: %v (want no-op)", err)
	}
}

func (s *suite) testStopGracefully(t *testing.T) {
	ctx := context.Background()
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	id := s.run(t, rt, p, s.containerConfig("polite", "/bin/sh", "-c", `trap "echo bye; exit 0" TERM; echo ready; while true; do sleep 0.1; done`))
	waitLog(t, status(t, rt, id).GetLogPath(), "ready")
	if err := rt.StopContainer(ctx, id, 60); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	st := status(t, rt, id)
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 0 {
		t.Errorf("state %v exit code %d, want EXITED 0 (the SIGTERM trap ran)", st.GetState(), st.GetExitCode())
	}
	if got := logText(readLog(t, st.GetLogPath()), "stdout"); len(got) != 2 || got[1] != "bye" {
		t.Errorf("stdout = %q, want [ready bye]", got)
	}
}

func (s *suite) testImages(t *testing.T) {
	ctx := context.Background()
	rt := s.runtime(t)
	st, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: s.opts.Image}, false)
	if err != nil || st.GetImage() == nil {
		t.Fatalf("ImageStatus(%q) = %v, %v; want the image", s.opts.Image, st, err)
	}
	images, err := rt.ListImages(ctx, nil)
	if err != nil || len(images) == 0 {
		t.Fatalf("ListImages = %v, %v; want at least the test image", images, err)
	}
	v, err := rt.Version(ctx, "v1")
	if err != nil || v.GetRuntimeName() == "" {
		t.Errorf("Version = %v, %v", v, err)
	}
	status, err := rt.Status(ctx, false)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, c := range status.GetStatus().GetConditions() {
		if !c.GetStatus() {
			t.Errorf("runtime condition %s is false: %s", c.GetType(), c.GetMessage())
		}
	}
}
