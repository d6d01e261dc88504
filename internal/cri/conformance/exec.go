package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

func (s *suite) testExecSync(t *testing.T) {
	ctx := context.Background()
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	workDir := t.TempDir()
	cfg := s.containerConfig("target", "sleep", "1000")
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi there")}}
	cfg.WorkingDir = workDir
	id := s.run(t, rt, p, cfg)

	stdout, stderr, err := rt.ExecSync(ctx, id, []string{"/bin/sh", "-c", `echo "$GREETING"; pwd; echo problem >&2`}, 30*time.Second)
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if want := "hi there\n" + workDir + "\n"; string(stdout) != want {
		t.Errorf("stdout = %q, want %q (container env and working dir)", stdout, want)
	}
	if string(stderr) != "problem\n" {
		t.Errorf("stderr = %q, want %q", stderr, "problem\n")
	}

	stdout, _, err = rt.ExecSync(ctx, id, []string{"/bin/sh", "-c", "echo partial; exit 4"}, 30*time.Second)
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 4 {
		t.Errorf("ExecSync exiting 4: err = %v, want an exec.ExitError with status 4", err)
	}
	if string(stdout) != "partial\n" {
		t.Errorf("stdout of failing command = %q, want %q", stdout, "partial\n")
	}

	_, _, err = rt.ExecSync(ctx, id, []string{"sleep", "60"}, time.Second)
	if err == nil {
		t.Errorf("ExecSync of sleep 60 with a 1s timeout succeeded, want a timeout error")
	} else if errors.As(err, &exitErr) {
		t.Errorf("ExecSync timeout reported as exit status %d, want a timeout error", exitErr.ExitStatus())
	}

	if _, _, err := rt.ExecSync(ctx, id, []string{"/no/such/binary"}, 30*time.Second); err == nil {
		t.Errorf("ExecSync of a missing binary succeeded, want an error")
	}

	// The container is unaffected by all of this.
	if st := status(t, rt, id); st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container state after execs = %v, want RUNNING", st.GetState())
	}
	if err := rt.StopContainer(ctx, id, 0); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, _, err := rt.ExecSync(ctx, id, []string{"true"}, 30*time.Second); err == nil {
		t.Errorf("ExecSync in an exited container succeeded, want an error")
	}
}

func (s *suite) testListFilters(t *testing.T) {
	ctx := context.Background()
	rt := s.runtime(t)
	pa := s.newPod(t, rt, map[string]string{"pod": "a", "tier": "web"})
	pb := s.newPod(t, rt, map[string]string{"pod": "b", "tier": "web"})
	runA := s.run(t, rt, pa, s.containerConfig("run-a", "sleep", "1000"))
	createdA := s.create(t, rt, pa, s.containerConfig("created-a", "sleep", "1000"))
	runB := s.run(t, rt, pb, s.containerConfig("run-b", "sleep", "1000"))

	ids := func(list []*runtimeapi.Container, err error) map[string]bool {
		t.Helper()
		if err != nil {
			t.Fatalf("ListContainers: %v", err)
		}
		out := map[string]bool{}
		for _, c := range list {
			out[c.GetId()] = true
		}
		return out
	}
	check := func(name string, got map[string]bool, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: got %d containers %v, want %v", name, len(got), got, want)
			return
		}
		for _, w := range want {
			if !got[w] {
				t.Errorf("%s: missing %s", name, w)
			}
		}
	}
	// Other tests share the runtime only if the factory does; scope every
	// query to our two sandboxes.
	check("sandbox a", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: pa.id})), runA, createdA)
	check("sandbox b", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: pb.id})), runB)
	check("id", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{Id: createdA})), createdA)
	check("running in a", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: pa.id,
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})), runA)
	check("created in a", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: pa.id,
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}})), createdA)
	check("label", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: pa.id,
		LabelSelector: map[string]string{"container": "run-a"}})), runA)
	check("no match", ids(rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: pa.id,
		LabelSelector: map[string]string{"container": "run-b"}})))

	sandboxIDs := func(filter *runtimeapi.PodSandboxFilter) map[string]bool {
		t.Helper()
		list, err := rt.ListPodSandbox(ctx, filter)
		if err != nil {
			t.Fatalf("ListPodSandbox: %v", err)
		}
		out := map[string]bool{}
		for _, sb := range list {
			if sb.GetId() == pa.id || sb.GetId() == pb.id {
				out[sb.GetId()] = true
			}
		}
		return out
	}
	check("sandbox by label", sandboxIDs(&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"pod": "b"}}), pb.id)
	check("sandbox by shared label", sandboxIDs(&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"tier": "web"}}), pa.id, pb.id)
	check("sandbox by id", sandboxIDs(&runtimeapi.PodSandboxFilter{Id: pa.id}), pa.id)
	if err := rt.StopPodSandbox(ctx, pb.id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	check("ready sandboxes", sandboxIDs(&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}), pa.id)
	check("not ready sandboxes", sandboxIDs(&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}), pb.id)
}
