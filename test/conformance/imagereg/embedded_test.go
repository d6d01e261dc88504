package imagereg_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
)

// The embedded runtime's image store pulls every image from the loopback
// registry (plain HTTP to a loopback host) and unpacks it with what the
// specs need: the image config, busybox's applet links, nnp's
// set-user-ID bit.
func TestEmbeddedStorePullsEveryImage(t *testing.T) {
	requireRoot(t)
	r := registry(t)
	store, err := imagestore.Open(slog.New(slog.DiscardHandler), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	user, pass := r.PrivateCredentials()
	for _, im := range r.Images() {
		var auth authn.Authenticator
		if im.Key == "privateRegistry" {
			auth = &authn.Basic{Username: user, Password: pass}
		}
		rec, err := store.Pull(ctx, im.Ref, auth, nil, time.Now().UnixNano())
		if err != nil {
			t.Errorf("embedded store: pull %s: %v", im.Ref, err)
			continue
		}
		if !slices.Contains(rec.RepoTags, im.Ref) {
			t.Errorf("embedded store: %s has tags %v", im.Ref, rec.RepoTags)
		}
		want := config(t, pullOK(t, r, im))
		if !slices.Equal(rec.Config.Entrypoint, want.Entrypoint) || !slices.Equal(rec.Config.Cmd, want.Cmd) || rec.Config.User != want.User {
			t.Errorf("embedded store: %s config %+v; the image has entrypoint %v cmd %v user %q", im.Ref, rec.Config, want.Entrypoint, want.Cmd, want.User)
		}
		switch im.ID {
		case "BusyBox":
			if target, err := os.Readlink(filepath.Join(store.LayerPath(rec.Layers[0]), "bin", "sh")); err != nil || target != "/bin/busybox" {
				t.Errorf("embedded store: busybox /bin/sh links to %q (%v)", target, err)
			}
		case "Nonewprivs":
			st, err := os.Stat(filepath.Join(store.LayerPath(rec.Layers[len(rec.Layers)-1]), "usr", "local", "bin", "nnp"))
			if err != nil || st.Mode()&os.ModeSetuid == 0 {
				t.Errorf("embedded store: nnp unpacked as %v (%v); want set-user-ID", st.Mode(), err)
			}
		}
	}
	if _, err := store.Pull(ctx, imageByID(t, r, "AgnhostPrivate").Ref, nil, nil, time.Now().UnixNano()); err == nil {
		t.Error("embedded store pulled the private image without credentials")
	}
	if _, err := store.Pull(ctx, r.Host()+"/invalid/alpine:3.1", nil, nil, time.Now().UnixNano()); err == nil {
		t.Error("embedded store pulled from the invalid registry")
	}
}
