package logs

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Rotated files sit next to the file they came from, the kubelet's way:
// "0.log" is renamed to "0.log.20260122-050000" (local time to the
// second), which later becomes "0.log.20260122-050000.gz". A ".tmp" suffix
// marks a compression that has not finished.
const (
	// RotationTimeFormat is the time layout of a rotated file's suffix.
	RotationTimeFormat = "20060102-150405"
	gzSuffix           = ".gz"
	tmpSuffix          = ".tmp"
)

// rotatedName matches a rotated file: the current file's name, its
// rotation time, and the compression suffixes.
var rotatedName = regexp.MustCompile(`^(.+\.log)\.(\d{8}-\d{6})(\.gz)?(\.tmp)?$`)

// rotatedFile is one file rotated away from a current log file.
type rotatedFile struct {
	name       string // base name in the directory
	stamp      string // rotation time, RotationTimeFormat
	compressed bool   // .gz
	partial    bool   // .tmp: compression cut short
}

// parseRotated returns what name says about a rotated file and the name of
// the current file it was rotated from.
func parseRotated(name string) (rotatedFile, string, bool) {
	m := rotatedName.FindStringSubmatch(name)
	if m == nil {
		return rotatedFile{}, "", false
	}
	if _, err := time.Parse(RotationTimeFormat, m[2]); err != nil {
		return rotatedFile{}, "", false
	}
	return rotatedFile{name: name, stamp: m[2], compressed: m[3] != "", partial: m[4] != ""}, m[1], true
}

// Policy bounds the log files of one container.
type Policy struct {
	// MaxSize is the size at which the current file is rotated.
	MaxSize int64
	// MaxFiles is how many files a container keeps, the current one
	// included; at least 2.
	MaxFiles int
}

// RotateFile rotates the log file at path when it holds MaxSize bytes or
// more. As the kubelet does, it first deletes the oldest rotated files so
// that, with the one about to be made, at most MaxFiles files exist; then
// it renames the file to path.<now> and calls reopen, which must make the
// writer continue in a new file at path; then it compresses every rotated
// file but the new one. When reopen fails the file is renamed back (unless
// the writer made a new one meanwhile) and the error returned. It reports
// whether it rotated; a missing file is an error wrapping os.ErrNotExist.
func (p Policy) RotateFile(path string, now time.Time, reopen func() error) (bool, error) {
	if p.MaxSize <= 0 || p.MaxFiles < 2 {
		return false, fmt.Errorf("log rotation policy %+v: want MaxSize > 0 and MaxFiles >= 2", p)
	}
	st, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("log file: %w", err)
	}
	if st.Size() < p.MaxSize {
		return false, nil
	}
	dir, base := filepath.Split(path)
	rotated, leftovers, err := listRotated(path)
	if err != nil {
		return false, err
	}
	errs := []error{leftovers}
	stamp := now.Format(RotationTimeFormat)
	for _, r := range rotated {
		if r.stamp == stamp {
			// Rotated already this second: another round will do.
			return false, leftovers
		}
	}
	if excess := len(rotated) - (p.MaxFiles - 2); excess > 0 {
		for _, r := range rotated[:excess] {
			if err := os.Remove(filepath.Join(dir, r.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove old rotated log: %w", err))
			}
		}
		rotated = rotated[excess:]
	}
	target := filepath.Join(dir, base+"."+stamp)
	if err := os.Rename(path, target); err != nil {
		return false, errors.Join(append(errs, fmt.Errorf("rotate log file %s: %w", path, err))...)
	}
	if err := reopen(); err != nil {
		if _, serr := os.Lstat(path); errors.Is(serr, os.ErrNotExist) {
			if rerr := os.Rename(target, path); rerr != nil {
				err = fmt.Errorf("%w (and renaming it back: %w)", err, rerr)
			}
		}
		return false, errors.Join(append(errs, fmt.Errorf("reopen log file %s: %w", path, err))...)
	}
	for _, r := range rotated {
		if !r.compressed {
			if err := compressFile(filepath.Join(dir, r.name)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return true, errors.Join(errs...)
}

// listRotated lists the files rotated from path, oldest first, after
// removing what an interrupted compression left: a .tmp file, or an
// uncompressed file whose .gz is complete. Failures to remove those are
// leftovers; err is a directory that cannot be read.
func listRotated(path string) (files []rotatedFile, leftovers, err error) {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list rotated logs of %s: %w", path, err)
	}
	byStamp := map[string][]rotatedFile{}
	for _, e := range entries {
		r, of, ok := parseRotated(e.Name())
		if ok && of == base && e.Type().IsRegular() {
			byStamp[r.stamp] = append(byStamp[r.stamp], r)
		}
	}
	var errs []error
	var out []rotatedFile
	for _, files := range byStamp {
		done := false // a complete .gz exists
		for _, r := range files {
			if r.compressed && !r.partial {
				done = true
			}
		}
		for _, r := range files {
			if r.partial || (done && !r.compressed) {
				if err := os.Remove(filepath.Join(dir, r.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("remove leftover rotated log: %w", err))
				}
				continue
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].stamp < out[j].stamp })
	return out, errors.Join(errs...), nil
}

// compressFile replaces path by path.gz. The archive is written to
// path.gz.tmp and renamed when complete, so a crash leaves either the
// original or the archive whole.
func compressFile(path string) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("compress rotated log: %w", err)
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("compress rotated log: %w", err)
	}
	tmp := path + gzSuffix + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return fmt.Errorf("compress rotated log: %w", err)
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress rotated log %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress rotated log %s: %w", path, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("compress rotated log %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress rotated log %s: %w", path, err)
	}
	if err := os.Rename(tmp, path+gzSuffix); err != nil {
		return fmt.Errorf("compress rotated log %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove compressed rotated log: %w", err)
	}
	return nil
}

// RemoveOrphanedRotations deletes the rotated files under root (in the
// layout <root>/<pod dir>/<container>/<file>) whose current file is not
// in live, the log paths of the containers the runtime still has: a
// removed container takes its rotated logs with it. It returns how many
// files it deleted.
func RemoveOrphanedRotations(root string, live map[string]bool) (int, error) {
	pods, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("list log directories: %w", err)
	}
	removed := 0
	var errs []error
	for _, pd := range pods {
		if !pd.IsDir() {
			continue
		}
		ctrs, err := os.ReadDir(filepath.Join(root, pd.Name()))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("list log directories: %w", err))
			}
			continue
		}
		for _, cd := range ctrs {
			if !cd.IsDir() {
				continue
			}
			dir := filepath.Join(root, pd.Name(), cd.Name())
			files, err := os.ReadDir(dir)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("list log files: %w", err))
				}
				continue
			}
			for _, f := range files {
				_, of, ok := parseRotated(f.Name())
				if !ok || !f.Type().IsRegular() || live[filepath.Join(dir, of)] {
					continue
				}
				if err := os.Remove(filepath.Join(dir, f.Name())); err != nil {
					if !errors.Is(err, os.ErrNotExist) {
						errs = append(errs, fmt.Errorf("remove rotated log of a removed container: %w", err))
					}
					continue
				}
				removed++
			}
		}
	}
	return removed, errors.Join(errs...)
}

// underRoot reports whether path lies below root.
func underRoot(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != ".."
}
