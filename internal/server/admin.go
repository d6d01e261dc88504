package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

// AdminSocketName is the agent's admin socket under its root dir. Unlike the
// read-only HTTP API it changes the node (it loads images), so it is a unix
// socket only root can open.
const AdminSocketName = "minilet.sock"

// LoadedImage is one image an uploaded archive held.
type LoadedImage struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repoTags,omitempty"`
}

// LoadedImageList is the body of a successful POST /images/load.
type LoadedImageList struct {
	Items []LoadedImage `json:"items"`
}

// ImageLoader imports the images of a docker-archive or OCI-layout tarball.
type ImageLoader interface {
	LoadImages(ctx context.Context, archive io.Reader) ([]LoadedImage, error)
}

// ImageLoaderFunc adapts a function to ImageLoader.
type ImageLoaderFunc func(ctx context.Context, archive io.Reader) ([]LoadedImage, error)

// LoadImages calls f.
func (f ImageLoaderFunc) LoadImages(ctx context.Context, archive io.Reader) ([]LoadedImage, error) {
	return f(ctx, archive)
}

// AdminConfig configures the admin server.
type AdminConfig struct {
	// Loader imports uploaded archives; nil answers 404 "not enabled".
	Loader ImageLoader
	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
	// ShutdownTimeout bounds graceful shutdown (an upload in progress is
	// cancelled after it). Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

// Admin serves the agent's admin API on its unix socket:
//
//	POST /images/load   body: an image archive → LoadedImageList
type Admin struct {
	srv *Server // for Serve's lifecycle and error writing
	cfg AdminConfig
}

// NewAdmin builds the admin server.
func NewAdmin(cfg AdminConfig) *Admin {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	a := &Admin{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /images/load", a.loadImages)
	a.srv = &Server{cfg: withTimeouts(Config{ShutdownTimeout: cfg.ShutdownTimeout}), log: cfg.Logger, handler: mux}
	return a
}

// Serve answers requests on ln until ctx ends, then shuts down like
// Server.Serve. Serve closes ln.
func (a *Admin) Serve(ctx context.Context, ln net.Listener) error {
	return a.srv.Serve(ctx, ln)
}

func (a *Admin) loadImages(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Loader == nil {
		a.srv.notEnabled(w, "image loading")
		return
	}
	imgs, err := a.cfg.Loader.LoadImages(r.Context(), r.Body)
	if err != nil {
		a.srv.writeError(w, fmt.Errorf("load images: %w", err))
		return
	}
	if imgs == nil {
		imgs = []LoadedImage{}
	}
	a.cfg.Logger.Info("images loaded through the admin socket", "count", len(imgs))
	a.srv.writeJSON(w, LoadedImageList{Items: imgs})
}

// AdminSocketPath is <rootDir>/minilet.sock.
func AdminSocketPath(rootDir string) string { return filepath.Join(rootDir, AdminSocketName) }

// ListenAdmin creates the admin socket <rootDir>/minilet.sock with mode
// 0600. A stale socket file left by a dead agent is replaced; one another
// live agent answers on is an ErrAlreadyExists error. The socket appears
// under its final name only once its mode is set.
func ListenAdmin(rootDir string) (net.Listener, error) {
	if err := os.MkdirAll(rootDir, 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	path := AdminSocketPath(rootDir)
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return nil, fmt.Errorf("admin socket %s: another agent is listening on it: %w", path, errdefs.ErrAlreadyExists)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	// Close must not unlink the temporary name: it is renamed below.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return &adminListener{Listener: ln, path: path}, nil
}

// adminListener removes the socket file when closed.
type adminListener struct {
	net.Listener
	path string
}

func (l *adminListener) Close() error {
	err := l.Listener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}
