package imagestore

import (
	"context"
	"fmt"
	"net"
	goruntime "runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/minilet/minilet/internal/errdefs"
)

// parseRef parses an image reference; loopback registries are spoken to
// over plain HTTP, all others over HTTPS.
func parseRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if isLoopbackRegistry(r.Context().RegistryStr()) {
		return name.ParseReference(ref, name.Insecure)
	}
	return r, nil
}

func isLoopbackRegistry(reg string) bool {
	host := reg
	if h, _, err := net.SplitHostPort(reg); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Pull fetches ref from its registry (for this machine's platform) and
// imports it, stored at now (Unix ns). The registry is authenticated with
// auth, or when that is nil with the credentials keys has for it. The
// returned record carries the reference's tag (if any) and the repo digest
// of the manifest.
func (s *Store) Pull(ctx context.Context, ref string, auth authn.Authenticator, keys authn.Keychain, now int64) (Record, error) {
	r, err := parseRef(ref)
	if err != nil {
		return Record{}, fmt.Errorf("pull image: field image %q is not a valid reference: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}),
		remote.WithUserAgent("minilet"),
	}
	if auth != nil {
		opts = append(opts, remote.WithAuth(auth))
	} else if keys != nil {
		opts = append(opts, remote.WithAuthFromKeychain(keys))
	}
	img, err := remote.Image(r, opts...)
	if err != nil {
		return Record{}, fmt.Errorf("pull image %q: %v: %w", ref, err, errdefs.ErrUnavailable)
	}
	src, err := sourceFromImage(img)
	if err != nil {
		return Record{}, fmt.Errorf("pull image %q: %v: %w", ref, err, errdefs.ErrUnavailable)
	}
	repo := registryName(r) + "/" + r.Context().RepositoryStr()
	var tags []string
	if _, ok := r.(name.Tag); ok {
		tags = []string{repo + ":" + r.Identifier()}
	}
	digests := []string{repo + "@" + src.manifestDigest.String()}
	rec, err := s.importImage(ctx, src, tags, digests, now)
	if err != nil {
		return Record{}, fmt.Errorf("pull image %q: %v: %w", ref, err, errdefs.ErrUnavailable)
	}
	return rec, nil
}
