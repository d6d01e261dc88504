package podsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/boundedread"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// FileConfig configures a FileSource.
type FileConfig struct {
	NodeName string        // required; pods are named NAME-NODENAME
	Path     string        // required; a directory of manifests, or one manifest file
	Period   time.Duration // full re-read interval (fileCheckFrequency); default 20s
	Debounce time.Duration // delay after a change event before reading; default 100ms
	Clock    clock.WithTicker
	Logger   *slog.Logger
	OnError  ErrorFunc // may be nil
}

// FileSource watches a directory (or one file) of static pod manifests:
// it reads at start, shortly after every filesystem change (fsnotify), and
// every Period in case an event was missed. Dotfiles, directories and other
// non-regular files are ignored; symlinks to regular files are followed.
// A file that cannot be read or parsed contributes no pods and is reported
// through OnError once per distinct problem. A pod whose namespace/name
// another file (earlier in path order) already defines is dropped and
// reported. A missing directory is an empty set. A file that parsed before
// and now does not (an editor's half-written save, a typo) keeps its last
// good pods until it parses again or is removed, so a broken save does not
// kill running pods.
type FileSource struct {
	cfg      FileConfig
	log      *slog.Logger
	pub      *publisher
	errs     *errorReporter
	missed   bool                 // the path was missing on the last read; owned by Run
	lastGood map[string][]*v1.Pod // pods of each file's last successful parse; owned by Run
}

// NewFile checks cfg and returns a source; call Run to start it.
func NewFile(cfg FileConfig) (*FileSource, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("file pod source: NodeName is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Path == "" {
		return nil, fmt.Errorf("file pod source: Path is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Period < 0 || cfg.Debounce < 0 {
		return nil, fmt.Errorf("file pod source: Period and Debounce must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Period == 0 {
		cfg.Period = 20 * time.Second
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Path = filepath.Clean(cfg.Path)
	return &FileSource{
		cfg:  cfg,
		log:  cfg.Logger.With("component", "podsource", "source", podspec.SourceFile, "path", cfg.Path),
		pub:  newPublisher(podspec.SourceFile),
		errs: newErrorReporter(cfg.OnError),
	}, nil
}

// Updates delivers full snapshots; an unread snapshot is replaced by a newer one.
func (s *FileSource) Updates() <-chan Update { return s.pub.ch }

// Run reads and watches until ctx ends. It returns only then (nil), or at
// once with an error if the watcher cannot be created.
func (s *FileSource) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file pod source %s: create watcher: %w", s.cfg.Path, err)
	}
	defer func() { _ = w.Close() }()

	watching := s.watch(w)
	s.Step()

	ticker := s.cfg.Clock.NewTicker(s.cfg.Period)
	defer ticker.Stop()
	debounce := s.cfg.Clock.NewTimer(s.cfg.Debounce)
	debounce.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			debounce.Stop()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if s.watchLost(ev) {
				watching = ""
			}
			if !pending && s.relevant(ev) {
				pending = true
				debounce.Reset(s.cfg.Debounce)
			}
		case err, ok := <-w.Errors:
			if ok {
				s.log.Warn("watch error; relying on periodic re-read", "err", err)
			}
		case <-debounce.C():
			pending = false
			s.Step()
		case <-ticker.C():
			if watching == "" {
				watching = s.watch(w)
			}
			s.Step()
		}
	}
}

// watch adds an inotify watch on the directory holding the manifests (the
// directory itself, or a single file's parent). It returns the watched
// directory, or "" when that is not possible yet (the periodic re-read
// tries again).
func (s *FileSource) watch(w *fsnotify.Watcher) string {
	dir := s.cfg.Path
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		dir = filepath.Dir(dir)
	}
	if err := w.Add(dir); err != nil {
		s.log.Debug("cannot watch manifest path yet", "dir", dir, "err", err)
		return ""
	}
	return dir
}

// watchLost reports events that end the watch (the watched dir went away).
func (s *FileSource) watchLost(ev fsnotify.Event) bool {
	return filepath.Clean(ev.Name) == s.cfg.Path && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0
}

// relevant filters events to the manifests this source reads.
func (s *FileSource) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if name == s.cfg.Path {
		return true
	}
	return filepath.Dir(name) == s.cfg.Path && !strings.HasPrefix(filepath.Base(name), ".")
}

// Step reads every manifest once and publishes the result if it changed.
// Run calls it; it is exported so tests and a one-shot mode can drive it.
func (s *FileSource) Step() {
	files, err := s.listFiles()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !s.missed {
			s.log.Info("manifest path does not exist; no static pods until it does")
			s.missed = true
		}
		files = nil
	case err != nil:
		s.log.Warn("cannot list manifests; keeping the last set", "err", err)
		s.errs.begin()
		s.errs.report(s.cfg.Path, err)
		s.errs.end()
		return
	default:
		s.missed = false
	}

	now := s.cfg.Clock.Now()
	s.errs.begin()
	var pods []*v1.Pod
	owner := map[string]string{} // namespace/name -> file defining it
	good := make(map[string][]*v1.Pod, len(files))
	for _, path := range files {
		got, err := s.readFile(path, now)
		if err != nil {
			s.errs.report(path, err)
			last, ok := s.lastGood[path]
			if !ok || errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("ignoring manifest", "file", path, "err", err)
				continue
			}
			s.log.Warn("manifest no longer parses; keeping its last good pods", "file", path, "err", err)
			got = make([]*v1.Pod, len(last))
			for i, pod := range last { // the old ones were handed out: never share them
				got[i] = pod.DeepCopy()
			}
		}
		good[path] = got
		got = dropDuplicates(append([]*v1.Pod(nil), got...), path, owner, s.errs)
		pods = append(pods, got...)
	}
	s.errs.end()
	s.lastGood = good
	if s.pub.publish(pods) {
		s.log.Debug("static pods changed", "pods", len(pods))
	}
}

// dropDuplicates removes pods whose namespace/name an earlier file (or an
// earlier document of the same file) already defines, reporting each.
func dropDuplicates(pods []*v1.Pod, path string, owner map[string]string, errs *errorReporter) []*v1.Pod {
	kept := pods[:0]
	for _, pod := range pods {
		key := podspec.FullName(pod)
		if first, ok := owner[key]; ok {
			errs.report(path, &ManifestError{Path: path, Err: fmt.Errorf(
				"pod %q is already defined by %s; ignoring the one in %s: %w", key, first, path, errdefs.ErrAlreadyExists)})
			continue
		}
		owner[key] = path
		kept = append(kept, pod)
	}
	return kept
}

// listFiles returns the manifest files in path order.
func (s *FileSource) listFiles() ([]string, error) {
	fi, err := os.Stat(s.cfg.Path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{s.cfg.Path}, nil
	}
	entries, err := os.ReadDir(s.cfg.Path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(s.cfg.Path, e.Name())
		fi, err := os.Stat(path) // follows symlinks
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, path)
	}
	sort.Strings(files)
	return files, nil
}

// MaxManifestSize bounds one manifest file (the kubelet's limit, 10 MiB);
// a larger file, or one that is not a regular file, is refused.
const MaxManifestSize = 10 << 20

// readFile reads one manifest: opened once, checked (a regular file within
// MaxManifestSize) and read on that descriptor, so a path swapped for
// /dev/zero or a FIFO after listFiles looked at it is refused, not read.
func (s *FileSource) readFile(path string, now time.Time) ([]*v1.Pod, error) {
	data, err := boundedread.File(path, MaxManifestSize)
	if errdefs.IsInvalidArgument(err) {
		return nil, &ManifestError{Path: path, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", path, err)
	}
	return ParseManifest(data, path, podspec.SourceFile, s.cfg.NodeName, now)
}
