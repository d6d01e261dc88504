package logs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// follow keeps writing what is appended to the file at path, starting at
// f's current offset, until ctx ends or the byte limit is reached. It wakes
// on file-system events in the file's directory and at least every
// PollInterval. When the path is replaced (rotation: renamed away and
// created anew) it finishes the old file and continues with the new one
// from its start; when the file shrinks (truncated) it starts over at 0.
func (p *printer) follow(ctx context.Context, path string, f *os.File) error {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer func() { _ = w.Close() }()
		// Watch the directory, not the file, so creation of a new file under
		// the same name after a rotation is seen too.
		if err := w.Add(filepath.Dir(path)); err == nil {
			events, errs = w.Events, w.Errors
		}
	}
	ticker := p.opts.Clock.NewTicker(p.opts.PollInterval)
	defer ticker.Stop()

	for {
		if err := p.copyAvailable(f); err != nil {
			return err
		}
		if p.limitReached() {
			return p.err
		}
		if p.opts.Done != nil && p.opts.Done() {
			// The writer is gone: what it wrote before is in the file now.
			if err := p.copyAvailable(f); err != nil {
				return err
			}
			p.writeUnterminated()
			return p.err
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				events = nil // watcher gone: rely on polling
			}
		case _, ok := <-errs:
			// Lost events (queue overflow) only delay us until the next
			// poll; nothing to do but read again.
			if !ok {
				errs = nil
			}
		case <-ticker.C():
		}
		next, err := p.reopenIfReplaced(path, f)
		if err != nil {
			return err
		}
		if next != f {
			_ = f.Close()
			f = next
		}
	}
}

// reopenIfReplaced returns f itself, or, when path now names another file,
// that file opened at its start after the rest of f was written. A path
// that is missing (between rename and create) keeps f.
func (p *printer) reopenIfReplaced(path string, f *os.File) (*os.File, error) {
	cur, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat followed log file %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return f, nil
		}
		return nil, fmt.Errorf("stat log file %s: %w", path, err)
	}
	if os.SameFile(cur, st) {
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("seek log file %s: %w", path, err)
		}
		if st.Size() < off {
			// Truncated in place: start over.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return nil, fmt.Errorf("seek log file %s: %w", path, err)
			}
			p.pending = nil
		}
		return f, nil
	}
	// Rotated: drain what the old file still holds, then switch.
	if err := p.copyAvailable(f); err != nil {
		return nil, err
	}
	nf, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return f, nil
		}
		return nil, fmt.Errorf("open rotated log file %s: %w", path, err)
	}
	p.pending = nil
	return nf, nil
}
