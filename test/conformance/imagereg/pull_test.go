package imagereg_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/minilet/minilet/test/conformance/imagereg"
)

// Every image pulls from the registry over plain HTTP, with the config the
// specs rely on (entrypoint, default command, user).
func TestEveryImagePullsWithItsConfig(t *testing.T) {
	r := registry(t)
	want := map[string]struct {
		entrypoint, cmd []string
		user            string
	}{
		"Agnhost":         {[]string{"/agnhost"}, []string{"pause"}, ""},
		"AgnhostPrev":     {[]string{"/agnhost"}, []string{"pause"}, ""},
		"AgnhostPrivate":  {[]string{"/agnhost"}, []string{"pause"}, ""},
		"BusyBox":         {nil, []string{"sh"}, ""},
		"GlibcDnsTesting": {nil, []string{"sh"}, ""},
		"Nginx":           {nil, []string{"httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"}, ""},
		"NginxNew":        {nil, []string{"httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"}, ""},
		"NonRoot":         {nil, []string{"sh"}, "1234"},
		"Nonewprivs":      {nil, []string{"nnp"}, ""},
		"Pause":           {[]string{"/pause"}, nil, "65535:65535"},
	}
	var ids []string
	for _, im := range r.Images() {
		ids = append(ids, im.ID)
		w, ok := want[im.ID]
		if !ok {
			t.Errorf("%s (%s): no expectation in this test", im.ID, im.Ref)
			continue
		}
		img := pullOK(t, r, im)
		c := config(t, img)
		if !slices.Equal(c.Entrypoint, w.entrypoint) || !slices.Equal(c.Cmd, w.cmd) || c.User != w.user {
			t.Errorf("%s: entrypoint %s cmd %s user %q; want %s %s %q", im.Ref,
				fmtList(c.Entrypoint), fmtList(c.Cmd), c.User, fmtList(w.entrypoint), fmtList(w.cmd), w.user)
		}
	}
	for id := range want {
		if !slices.Contains(ids, id) {
			t.Errorf("the registry serves no %s image", id)
		}
	}
}

// The private repository answers 401 without its credentials, as the
// specs that pull from privateRegistry expect.
func TestPrivateRepositoryNeedsCredentials(t *testing.T) {
	r := registry(t)
	im := imageByID(t, r, "AgnhostPrivate")
	_, err := pull(im.Ref, nil)
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous pull of %s: %v; want 401 Unauthorized", im.Ref, err)
	}
	if _, err := pull(im.Ref, &authn.Basic{Username: "user", Password: "wrong"}); err == nil {
		t.Fatalf("pull of %s with a wrong password succeeded", im.Ref)
	}
	pullOK(t, r, im)
}

// Building twice from the same programs gives the same digests.
func TestImagesAreReproducible(t *testing.T) {
	first := registry(t)
	second, err := imagereg.Start(context.Background(), filepath.Join(t.TempDir(), "reg"),
		imagereg.Binaries{Agnhost: shared.agnhost}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Close() }()
	if first.Host() == second.Host() {
		t.Fatalf("two registries on one address %s", first.Host())
	}
	for _, a := range first.Images() {
		b := imageByID(t, second, a.ID)
		da, err := pullOK(t, first, a).Digest()
		if err != nil {
			t.Fatal(err)
		}
		db, err := pullOK(t, second, b).Digest()
		if err != nil {
			t.Fatal(err)
		}
		if da != db {
			t.Errorf("%s: digest %s, then %s", a.ID, da, db)
		}
		if strings.TrimPrefix(a.Ref, first.Host()) != strings.TrimPrefix(b.Ref, second.Host()) {
			t.Errorf("%s: %s, then %s", a.ID, a.Ref, b.Ref)
		}
	}
}

// Close ends the server: the port no longer answers, and a second Close
// is harmless.
func TestCloseStopsServing(t *testing.T) {
	r, err := imagereg.Start(context.Background(), filepath.Join(t.TempDir(), "reg"),
		imagereg.Binaries{Agnhost: registryAgnhost(t)}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	im := imageByID(t, r, "Pause")
	pullOK(t, r, im)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pull(im.Ref, nil); err == nil {
		t.Fatalf("pull of %s succeeded after Close", im.Ref)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// registryAgnhost is the agnhost binary the shared registry was built with.
func registryAgnhost(t *testing.T) string {
	t.Helper()
	registry(t)
	return shared.agnhost
}

// Start refuses a missing agnhost with a message naming the field.
func TestStartNeedsAgnhost(t *testing.T) {
	for _, bins := range []imagereg.Binaries{{}, {Agnhost: filepath.Join(t.TempDir(), "missing")}} {
		_, err := imagereg.Start(context.Background(), t.TempDir(), bins, t.Logf)
		if err == nil || !strings.Contains(err.Error(), "Binaries.Agnhost") {
			t.Errorf("Start with Agnhost %q: %v; want an error naming Binaries.Agnhost", bins.Agnhost, err)
		}
	}
}
