package embedded

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/cri/embedded/internal/testlayer"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/spf13/cobra"

	"github.com/minilet/minilet/internal/cli"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/server"
)

// adminLoader adapts the runtime to the admin server, as the agent does.
func adminLoader(r *Runtime) server.ImageLoader {
	return server.ImageLoaderFunc(func(ctx context.Context, archive io.Reader) ([]server.LoadedImage, error) {
		imgs, err := r.LoadArchive(ctx, archive)
		out := make([]server.LoadedImage, 0, len(imgs))
		for _, i := range imgs {
			out = append(out, server.LoadedImage{ID: i.ID, RepoTags: i.RepoTags})
		}
		return out, err
	})
}

// TestImageLoadThroughAdminSocket runs `minilet image load` against the
// admin socket of a runtime: CLI, socket and store, all real.
func TestImageLoadThroughAdminSocket(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	r := newTestRuntime(t, root)
	ln, err := server.ListenAdmin(root)
	if err != nil {
		t.Fatalf("ListenAdmin: %v", err)
	}
	fi, err := os.Stat(filepath.Join(root, "minilet.sock"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v, mode %v; want a 0600 socket", err, fi.Mode())
	}
	if _, err := server.ListenAdmin(root); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second ListenAdmin on a live socket = %v, want ErrAlreadyExists", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- server.NewAdmin(server.AdminConfig{Loader: adminLoader(r), Logger: testLogger(t)}).Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("admin Serve: %v", err)
		}
	})

	img := testImage(t, v1.Config{Cmd: []string{"/x"}}, testlayer.Tar(t, testlayer.File("x", "x", 0o755)))
	tag, _ := name.NewTag("registry.example/app:2")
	archive := filepath.Join(t.TempDir(), "app.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		root := &cobra.Command{Use: "minilet", SilenceUsage: true, SilenceErrors: true}
		cli.AddCommands(root, cli.Options{})
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("image", "load", archive, "--root-dir", root)
	if err != nil {
		t.Fatalf("image load: %v (%s)", err, out)
	}
	if out != "Loaded image: registry.example/app:2\n" {
		t.Fatalf("image load printed %q", out)
	}
	if st := imageStatus(t, r, "registry.example/app:2"); st == nil || st.Id != configDigest(t, img) {
		t.Fatalf("loaded image not in the store: %v", st)
	}
	// A broken archive is the user's error, reported as such.
	bad := filepath.Join(t.TempDir(), "bad.tar")
	if err := os.WriteFile(bad, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("image", "load", bad, "--root-dir", root); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "archive") {
		t.Fatalf("loading garbage: %v (%s), want an invalid-argument error about the archive", err, out)
	}
	// No agent: a clear error.
	if _, err := run("image", "load", archive, "--root-dir", t.TempDir()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("image load without an agent = %v, want ErrUnavailable", err)
	}
}
