package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/minilet/minilet/internal/errdefs"
)

// files does the counted reads and writes of control files.
type files struct {
	writes atomic.Uint64
}

func (f *files) write(dir, file, value string) error {
	f.writes.Add(1)
	p := filepath.Join(dir, file)
	fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, classify(err))
	}
	_, err = fd.WriteString(value)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, classify(err))
	}
	return nil
}

func (f *files) mkdir(p string) (created bool, err error) {
	f.writes.Add(1)
	err = os.Mkdir(p, 0o755)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrExist):
		return false, nil
	}
	return false, fmt.Errorf("create cgroup %s: %w", p, classify(err))
}

func classify(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return errors.Join(err, errdefs.ErrNotFound)
	}
	return err
}

func readString(dir, file string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "", classify(err)
	}
	return strings.TrimSpace(string(data)), nil
}

// readUint parses a single-number file; "max" reads as 0.
func readUint(dir, file string) (uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s/%s %q: %w", dir, file, s, err)
	}
	return v, nil
}

// readKV parses a "key value" per line file (memory.stat, cpu.stat, ...).
func readKV(dir, file string) (map[string]uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// readPids reads a cgroup.procs file.
func readPids(dir string) ([]int, error) {
	s, err := readString(dir, "cgroup.procs")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(s) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// subdirs lists the child directories of dir (cgroups, in a cgroup fs).
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, classify(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// pidsUnder returns the sorted, distinct pids of dirs and all their
// descendant cgroups; a missing dir contributes none.
func pidsUnder(dirs ...string) ([]int, error) {
	seen := map[int]bool{}
	for _, dir := range dirs {
		if err := walkPids(dir, seen); err != nil {
			return nil, err
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, nil
}

// walkPids collects the pids of dir and all descendant cgroups.
func walkPids(dir string, seen map[int]bool) error {
	pids, err := readPids(dir)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	}
	for _, p := range pids {
		seen[p] = true
	}
	kids, err := subdirs(dir)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	}
	for _, k := range kids {
		if err := walkPids(filepath.Join(dir, k), seen); err != nil {
			return err
		}
	}
	return nil
}

// removeTree removes dir's descendant cgroups deepest first, then dir.
// rm is os.Remove on a cgroup fs (rmdir) and os.RemoveAll for plain
// directory trees in tests. A leaf is removed without listing it first.
func removeTree(dir string, rm func(string) error) error {
	err := rm(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	kids, lerr := subdirs(dir)
	if lerr != nil {
		if errors.Is(lerr, errdefs.ErrNotFound) {
			return nil
		}
		return lerr
	}
	if len(kids) == 0 {
		return err // busy for another reason (processes): report it
	}
	for _, k := range kids {
		if err := removeTree(filepath.Join(dir, k), rm); err != nil {
			return err
		}
	}
	if err := rm(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
