package spec

import (
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestFromImageOverrideRules(t *testing.T) {
	img := &imagestore.Record{ID: "sha256:x", Config: imagestore.ImageConfig{Entrypoint: []string{"/ep"}, Cmd: []string{"c1"}, Env: []string{"A=img", "B=img"}, WorkingDir: "/w", User: "app:staff"}}
	for _, tc := range []struct {
		name      string
		cmd, args []string
		want      string
	}{
		{"image defaults", nil, nil, "/ep c1"},
		{"args replace Cmd", nil, []string{"a1"}, "/ep a1"},
		{"command drops Cmd", []string{"/c"}, nil, "/c"},
		{"command and args", []string{"/c"}, []string{"a1", "a2"}, "/c a1 a2"},
	} {
		p, err := FromImage(img, &runtimeapi.ContainerConfig{Command: tc.cmd, Args: tc.args,
			Envs: []*runtimeapi.KeyValue{{Key: "B", Value: []byte("pod")}}}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.Join(p.Args, " "); got != tc.want {
			t.Errorf("%s: argv %q, want %q", tc.name, got, tc.want)
		}
		if p.Env[0] != "A=img" || p.Env[1] != "B=pod" || p.WorkingDir != "/w" || p.Security.User.Name != "app" || p.Security.User.Group != "staff" {
			t.Errorf("%s: env %v wd %s user %+v", tc.name, p.Env, p.WorkingDir, p.Security.User)
		}
	}
	p, err := FromImage(img, &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{
		SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 42}}}}, nil)
	if err != nil || p.Security.User.UID == nil || *p.Security.User.UID != 42 || p.Security.User.Name != "" {
		t.Fatalf("runAsUser did not win: %+v, %v", p.Rootfs, err)
	}
	if _, err := FromImage(&imagestore.Record{ID: "sha256:y"}, &runtimeapi.ContainerConfig{}, nil); err == nil {
		t.Fatal("no command anywhere was accepted")
	}
	bad := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"FLY"}}}}}
	if _, err := FromImage(&imagestore.Record{ID: "sha256:z", Config: imagestore.ImageConfig{Cmd: []string{"x"}}}, bad, nil); err == nil || !strings.Contains(err.Error(), "capabilities.add") {
		t.Fatalf("unknown capability accepted: %v", err)
	}
}

func TestFromHost(t *testing.T) {
	p, err := FromHost(&runtimeapi.ContainerConfig{Command: []string{"sleep"}, Args: []string{"1"},
		Envs: []*runtimeapi.KeyValue{{Key: "HOME", Value: []byte("/home/x")}}, WorkingDir: "/tmp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(p.Env, " ")
	if strings.Join(p.Args, " ") != "sleep 1" || p.WorkingDir != "/tmp" || p.Rootfs != nil ||
		!strings.Contains(env, "HOME=/home/x") || !strings.Contains(env, "PATH=/") || strings.Contains(env, "HOME=/root") {
		t.Errorf("FromHost = %+v", p)
	}
	if _, err := FromHost(&runtimeapi.ContainerConfig{}, nil); err == nil || !strings.Contains(err.Error(), "command") {
		t.Errorf("no command: err = %v, want one naming the command", err)
	}
}

func TestImageUserID(t *testing.T) {
	for user, want := range map[string]int64{"1000": 1000, "0:0": 0, "app": -1, "": -1, "-1": -1} {
		uid, ok := ImageUserID(user)
		if (want >= 0) != ok || (ok && uid != want) {
			t.Errorf("ImageUserID(%q) = %d, %v; want %d", user, uid, ok, want)
		}
	}
}
