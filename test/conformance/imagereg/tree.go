package imagereg

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// epoch is the one timestamp every file, layer and image config carries,
// so that the same inputs always give the same digests.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// node is one entry of a layer: a directory, a regular file (from memory
// or copied from a host file) or a symbolic link.
type node struct {
	typ      byte
	mode     int64 // permission and set-ID bits
	uid, gid int
	data     []byte
	hostPath string
	target   string
}

// tree is the content of one image layer, built in memory and written as
// a reproducible gzip'd tar (sorted names, fixed times, numeric owners).
type tree struct {
	nodes map[string]node
	layer v1.Layer // once written (layerOf)
}

func newTree() *tree { return &tree{nodes: map[string]node{}} }

// clean turns an absolute image path into the tar name ("bin/sh").
func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

func (t *tree) add(p string, n node) {
	p = clean(p)
	for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := t.nodes[dir]; !ok {
			t.nodes[dir] = node{typ: tar.TypeDir, mode: 0o755}
		}
	}
	t.nodes[p] = n
}

// dir adds a directory owned by root.
func (t *tree) dir(p string, mode int64) { t.add(p, node{typ: tar.TypeDir, mode: mode}) }

// ownedDir adds a directory owned by uid:gid.
func (t *tree) ownedDir(p string, mode int64, uid, gid int) {
	t.add(p, node{typ: tar.TypeDir, mode: mode, uid: uid, gid: gid})
}

// file adds a regular file with the given content, owned by root.
func (t *tree) file(p string, mode int64, data []byte) {
	t.add(p, node{typ: tar.TypeReg, mode: mode, data: data})
}

// hostFile adds a regular file owned by root whose content is the host
// file src (symbolic links followed).
func (t *tree) hostFile(p string, mode int64, src string) {
	t.add(p, node{typ: tar.TypeReg, mode: mode, hostPath: src})
}

// symlink adds a symbolic link to target.
func (t *tree) symlink(p, target string) {
	t.add(p, node{typ: tar.TypeSymlink, mode: 0o777, target: target})
}

// writeLayer writes the tree as a gzip'd tar at out.
func (t *tree) writeLayer(out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw := gzip.NewWriter(f) // no name, no mtime: reproducible
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(t.nodes))
	for n := range t.nodes {
		names = append(names, n)
	}
	sort.Strings(names) // a parent sorts before its children
	for _, name := range names {
		if err := writeNode(tw, name, t.nodes[name]); err != nil {
			return fmt.Errorf("layer %s: /%s: %w", filepath.Base(out), name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func writeNode(tw *tar.Writer, name string, n node) error {
	hdr := &tar.Header{
		Typeflag: n.typ,
		Name:     name,
		Mode:     n.mode,
		Uid:      n.uid,
		Gid:      n.gid,
		ModTime:  epoch,
		Format:   tar.FormatPAX,
	}
	switch n.typ {
	case tar.TypeDir:
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case tar.TypeSymlink:
		hdr.Linkname = n.target
		return tw.WriteHeader(hdr)
	}
	if n.hostPath == "" {
		hdr.Size = int64(len(n.data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(n.data)
		return err
	}
	src, err := os.Open(n.hostPath)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", n.hostPath)
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("copy %s: %w", n.hostPath, err)
	}
	return nil
}
