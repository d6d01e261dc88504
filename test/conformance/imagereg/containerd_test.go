package imagereg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerd (1.6, as scripts/containerd-up.sh starts it, with no
// registry configuration) pulls every image from the loopback registry
// over plain HTTP through its CRI, and fails the pulls the specs expect
// to fail.
func TestContainerdPullsEveryImage(t *testing.T) {
	ep := harness.ContainerdEndpoint(t)
	r := registry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, err := remote.New(ctx, remote.Config{Endpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	user, pass := r.PrivateCredentials()

	for _, im := range r.Images() {
		var auth *runtimeapi.AuthConfig
		if im.Key == "privateRegistry" {
			auth = &runtimeapi.AuthConfig{Username: user, Password: pass}
		}
		criPull(ctx, t, rt, im.Ref, auth)
	}

	private := imageByID(t, r, "AgnhostPrivate").Ref
	if _, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: private}, nil, nil); err == nil {
		t.Errorf("containerd pulled %s without credentials", private)
		removeImage(ctx, t, rt, private)
	}
	// manifest.go's InvalidRegistryImage under the repo list's invalidRegistry.
	invalid := r.Host() + "/invalid/alpine:3.1"
	if _, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: invalid}, nil, nil); err == nil {
		t.Errorf("containerd pulled %s from the invalid registry", invalid)
		removeImage(ctx, t, rt, invalid)
	}
}

// containerd pulls the private-registry specs' image from agnhost's
// fake-registry-server on localhost, with the pull secret's credentials
// only.
func TestContainerdPullsFromAgnhostFakeRegistry(t *testing.T) {
	ep := harness.ContainerdEndpoint(t)
	requireAgnhost(t)
	port, logs := startFakeRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := remote.New(ctx, remote.Config{Endpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	ref := fmt.Sprintf("localhost:%d/pause:testing", port)
	if _, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: ref}, nil, nil); err == nil {
		removeImage(ctx, t, rt, ref)
		t.Fatalf("containerd pulled %s without credentials", ref)
	}
	if t.Failed() {
		t.Log(logs.String())
	}
	criPull(ctx, t, rt, ref, &runtimeapi.AuthConfig{Username: "user", Password: "password"})
}

// criPull pulls ref through the CRI, checks the runtime lists it, and
// removes it again (the containerd is shared with other tests).
func criPull(ctx context.Context, t *testing.T, rt *remote.Runtime, ref string, auth *runtimeapi.AuthConfig) {
	t.Helper()
	got, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: ref}, auth, nil)
	if err != nil {
		t.Errorf("containerd: pull %s: %v", ref, err)
		return
	}
	defer removeImage(ctx, t, rt, ref)
	st, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil || st.GetImage() == nil {
		t.Errorf("containerd: pulled %s (%s) but its status is %v, %v", ref, got, st, err)
		return
	}
	found := false
	for _, tag := range st.GetImage().GetRepoTags() {
		found = found || tag == ref
	}
	if !found {
		t.Errorf("containerd: %s has tags %v", ref, st.GetImage().GetRepoTags())
	}
}

func removeImage(ctx context.Context, t *testing.T, rt *remote.Runtime, ref string) {
	t.Helper()
	if err := rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: ref}); err != nil {
		t.Errorf("containerd: remove %s: %v", ref, err)
	}
}
