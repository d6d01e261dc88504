package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// helpers builds the C exec helper (scripts/build-exec-helper.sh, the C
// build mandatory) and this Go program, and returns both paths.
func helpers(t *testing.T) (c, goOnly string) {
	t.Helper()
	buildOnce.Do(func() {
		if builtDir, buildErr = os.MkdirTemp("", "minilet-exec-test-"); buildErr != nil {
			return
		}
		for _, b := range []struct{ out, mode string }{{"c", "c"}, {"go", "go"}} {
			cmd := exec.Command("../../scripts/build-exec-helper.sh", filepath.Join(builtDir, b.out))
			cmd.Env = append(os.Environ(), "MINILET_EXEC_HELPER="+b.mode)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = errors.New("build-exec-helper.sh (" + b.mode + "): " + err.Error() + "\n" + string(out))
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(builtDir, "c"), filepath.Join(builtDir, "go")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

type result struct {
	report, stdout string
	code           int
}

// run starts helper as the agent does: argv[0] minilet-exec, the marker
// variables, fd 3 the report pipe.
func run(t *testing.T, helper string, args, env []string) result {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	var stdout bytes.Buffer
	cmd := &exec.Cmd{Path: helper, Args: append([]string{monitorproc.TrampolineArg0}, args...),
		Env: append([]string{monitorproc.TrampolineEnv + "=1"}, env...), Stdout: &stdout, ExtraFiles: []*os.File{w}}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		t.Fatal(err)
	}
	report, _ := io.ReadAll(r)
	_ = cmd.Wait()
	return result{report: string(report), stdout: stdout.String(), code: cmd.ProcessState.ExitCode()}
}

// TestCHelperMatchesGoTrampoline: the C helper and the Go trampoline give
// the same result, and the same error on fd 3, for what needs no container.
func TestCHelperMatchesGoTrampoline(t *testing.T) {
	c, goOnly := helpers(t)
	sec := monitorproc.TrampolineSecEnv + "="
	for _, tc := range []struct {
		name      string
		args, env []string
		want      result
	}{
		{"runs the command with the markers removed", []string{"--", "sh", "-c", `echo "$GREETING"; env | grep -c MINILET_EMBEDDED_EXEC; exit 3`},
			[]string{"PATH=/usr/bin:/bin", "GREETING=hi", monitorproc.TrampolineDirEnv + "=/"},
			result{stdout: "hi\n0\n", code: 3}},
		{"missing binary by path", []string{"--", "/no/such/binary"}, nil,
			result{report: `executable "/no/such/binary" not found: stat /no/such/binary: no such file or directory`, code: 127}},
		{"missing binary in PATH", []string{"--", "no-such-command"}, []string{"PATH=/bin:"},
			result{report: `executable "no-such-command" not found in $PATH`, code: 127}},
		{"empty PATH", []string{"--", "true"}, []string{"PATH="},
			result{report: `executable "true" not found in $PATH`, code: 127}},
		{"no command", []string{"/sys/fs/cgroup/memory"}, nil, result{report: "trampoline: no command", code: 127}},
		{"missing cgroup", []string{"/no/such/cgroup", "--", "true"}, nil,
			result{report: "join cgroup /no/such/cgroup: open /no/such/cgroup/cgroup.procs: no such file or directory", code: 127}},
		{"malformed security", []string{"--", "true"}, []string{sec + "12:n:"},
			result{report: "container's security context: malformed " + monitorproc.TrampolineSecEnv, code: 127}},
		{"odd seccomp filter", []string{"--", "true"}, []string{sec + "0000000000000000:n:0"},
			result{report: "container's security context: seccomp filter: encoding/hex: odd length hex string", code: 127}},
		{"malformed seccomp filter", []string{"--", "true"}, []string{sec + "0000000000000000:n:00ff"},
			result{report: "seccomp filter of 2 bytes is malformed", code: 127}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, helper := range map[string]string{"C": c, "Go": goOnly} {
				if got := run(t, helper, tc.args, tc.env); got != tc.want {
					t.Errorf("%s helper: %+v, want %+v", name, got, tc.want)
				}
			}
		})
	}
}

// TestNotForHands: run by hand, the helper says what it is for.
func TestNotForHands(t *testing.T) {
	c, _ := helpers(t)
	out, err := exec.Command(c).CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 || !bytes.Contains(out, []byte("started by the minilet agent")) {
		t.Errorf("run by hand: %v %q, want exit 2 and an explanation", err, out)
	}
}
