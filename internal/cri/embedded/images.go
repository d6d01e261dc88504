package embedded

import (
	"context"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
	"github.com/minilet/minilet/internal/cri/embedded/spec"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages lists the stored images and "host". The filter, when set,
// selects the one image a reference resolves to.
func (r *Runtime) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if ref := filter.GetImage().GetImage(); ref != "" {
		if isHostImage(ref) {
			return []*runtimeapi.Image{hostImageInfo()}, nil
		}
		rec, ok := r.images.Get(ref)
		if !ok {
			return nil, nil
		}
		return []*runtimeapi.Image{r.criImage(&rec)}, nil
	}
	recs := r.images.List()
	out := make([]*runtimeapi.Image, 0, len(recs)+1)
	out = append(out, hostImageInfo())
	for i := range recs {
		out = append(out, r.criImage(&recs[i]))
	}
	return out, nil
}

// ImageStatus reports an image found by ID, tag or digest (short forms such
// as "busybox" are normalized); a missing image is a nil Image, not an
// error (CRI).
func (r *Runtime) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	ref := image.GetImage()
	if isHostImage(ref) {
		return &runtimeapi.ImageStatusResponse{Image: hostImageInfo()}, nil
	}
	rec, ok := r.images.Get(ref)
	if !ok {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	resp := &runtimeapi.ImageStatusResponse{Image: r.criImage(&rec)}
	if verbose {
		resp.Info = map[string]string{"manifestDigest": rec.ManifestDigest, "layers": fmt.Sprint(len(rec.Layers))}
	}
	return resp, nil
}

// PullImage fetches an image from its registry, with the request's
// credentials or else those of the configured docker config files, and
// returns its ID (the config digest), which is also the ImageRef of the
// containers created from it. Loopback registries are reached over HTTP.
func (r *Runtime) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	ref := image.GetImage()
	if isHostImage(ref) {
		return hostImage, nil
	}
	rec, err := r.images.Pull(ctx, ref, authenticatorFor(auth), r.keychain, r.clock.Now().UnixNano())
	if err != nil {
		return "", criErr(err)
	}
	r.log.Info("image pulled", "image", ref, "id", rec.ID, "size", rec.Size)
	return rec.ID, nil
}

// RemoveImage removes an image (all its tags) found by ID, tag or digest.
// As with containerd it succeeds even when containers use the image: their
// layers stay until the last such container is removed (image GC is what
// spares images in use). Removing an unknown image is not an error.
func (r *Runtime) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	ref := image.GetImage()
	if isHostImage(ref) {
		return errInvalid("remove image: field image %q is the host filesystem and cannot be removed", hostImage)
	}
	rec, ok := r.images.Get(ref)
	if !ok {
		return nil
	}
	if _, err := r.images.Remove(rec.ID, r.ctrs.LayersInUse); err != nil {
		return criErr(fmt.Errorf("remove image %q: %w", ref, err))
	}
	r.log.Info("image removed", "image", ref, "id", rec.ID, "tags", rec.RepoTags)
	return nil
}

// ImageFsInfo reports the image store: its bytes and inodes, on the
// filesystem mounted at Mountpoint.
func (r *Runtime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	used, inodes := r.images.Usage()
	usage := &runtimeapi.FilesystemUsage{
		Timestamp:  r.clock.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: r.images.Root()},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{usage}}, nil
}

// FsStats describes the filesystem holding the image store.
type FsStats struct {
	// Path is the image store directory.
	Path string
	// CapacityBytes, AvailableBytes (to unprivileged users) and UsedBytes
	// are the filesystem's, from statfs.
	CapacityBytes, AvailableBytes, UsedBytes uint64
	// InodesTotal, InodesFree are the filesystem's inodes.
	InodesTotal, InodesFree uint64
	// ImagesBytes and ImagesInodes are what the stored images take.
	ImagesBytes, ImagesInodes uint64
}

// ImageFilesystemStats reports capacity and availability of the image filesystem,
// which CRI's ImageFsInfo does not carry (image GC and eviction need them).
func (r *Runtime) ImageFilesystemStats(ctx context.Context) (FsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(r.images.Root(), &st); err != nil {
		return FsStats{}, errUnavailable("image filesystem stats of %s: %v", r.images.Root(), err)
	}
	bs := uint64(st.Bsize)
	fs := FsStats{
		Path:          r.images.Root(),
		CapacityBytes: st.Blocks * bs, AvailableBytes: st.Bavail * bs, UsedBytes: (st.Blocks - st.Bfree) * bs,
		InodesTotal: st.Files, InodesFree: st.Ffree,
	}
	fs.ImagesBytes, fs.ImagesInodes = r.images.Usage()
	return fs, nil
}

// criImage converts a record; pinned images (config PinnedImages) say so.
func (r *Runtime) criImage(rec *imagestore.Record) *runtimeapi.Image {
	img := &runtimeapi.Image{
		Id: rec.ID, RepoTags: append([]string(nil), rec.RepoTags...), RepoDigests: append([]string(nil), rec.RepoDigests...),
		Size: rec.Size, Pinned: r.pinned.Match(rec),
	}
	if img.Size == 0 {
		img.Size = 1 // CRI wants a positive size
	}
	if uid, ok := spec.ImageUserID(rec.Config.User); ok {
		img.Uid = &runtimeapi.Int64Value{Value: uid}
	} else if rec.Config.User != "" {
		img.Username = rec.Config.User
	}
	return img
}

func hostImageInfo() *runtimeapi.Image {
	return &runtimeapi.Image{Id: hostImage, RepoTags: []string{hostImage}, Size: 1, Pinned: true} // CRI wants size > 0; the host filesystem is not ours to count
}

// LoadedImage is one image an archive held.
type LoadedImage = imagestore.LoadedImage

// LoadArchive imports every image of a docker-archive (`docker save`) or
// OCI-layout tarball read from archive. A docker archive's "RepoTags" and
// an OCI index's image-name annotations become the images' tags.
func (r *Runtime) LoadArchive(ctx context.Context, archive io.Reader) ([]LoadedImage, error) {
	imgs, err := r.images.LoadArchive(ctx, archive, r.clock.Now().UnixNano())
	return imgs, criErr(err)
}

// authenticatorFor turns the CRI credentials of a pull request into an
// authenticator, or nil when the request carries none.
func authenticatorFor(a *runtimeapi.AuthConfig) authn.Authenticator {
	if a == nil {
		return nil
	}
	cfg := authn.AuthConfig{Username: a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(),
		IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken()}
	if cfg == (authn.AuthConfig{}) {
		return nil
	}
	return authn.FromConfig(cfg)
}
