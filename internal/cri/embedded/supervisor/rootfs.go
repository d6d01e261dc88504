package supervisor

import (
	"os"
	"path/filepath"

	"github.com/minilet/minilet/internal/cri/embedded/layerfs"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// prepareRootfs creates the writable layer of a container from an image in
// its state directory: an overlay upper and work dir, or (rf.Copy, where
// overlayfs cannot be mounted) a full copy of the image's merged layers.
func (s *Supervisor) prepareRootfs(dir string, rf *Rootfs) error {
	base := filepath.Join(dir, dirRootfs)
	if rf.Copy {
		var layers []string
		for _, l := range rf.Layers {
			layers = append(layers, s.layers.LayerPath(l))
		}
		return layerfs.Flatten(layers, filepath.Join(base, "merged"))
	}
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// rootfsSpec is the container init's view of a container's root
// filesystem.
func (s *Supervisor) rootfsSpec(dir string, rf *Rootfs) *monitorproc.RootfsSpec {
	base := filepath.Join(dir, dirRootfs)
	spec := &monitorproc.RootfsSpec{Merged: filepath.Join(base, "merged"), Copy: rf.Copy, Mounts: rf.Mounts}
	if !rf.Copy {
		spec.Upper, spec.Work = filepath.Join(base, "upper"), filepath.Join(base, "work")
		// overlayfs refuses a directory twice; a repeated layer (typically
		// the empty one) only matters at its topmost position.
		seen := map[string]bool{}
		for i := len(rf.Layers) - 1; i >= 0; i-- {
			if !seen[rf.Layers[i]] {
				seen[rf.Layers[i]] = true
				spec.Lower = append(spec.Lower, s.layers.LayerPath(rf.Layers[i]))
			}
		}
	}
	return spec
}
