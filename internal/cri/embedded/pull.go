package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	goruntime "runtime"
	"strings"
	"sync"

	"github.com/minilet/minilet/internal/cri/embedded/layerfs"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageSource is an image to import, whatever it came from.
type imageSource struct {
	config         []byte
	manifest       []byte // nil when the source has none (docker-archive)
	manifestDigest v1.Hash
	// layers open the uncompressed tar streams, base layer first.
	layers []func() (io.ReadCloser, error)
}

// maxParallelLayers bounds the layers fetched and unpacked at once per image.
const maxParallelLayers = 3

// importImage unpacks src's layers, stores its blobs and records it under
// tags and digests.
func (s *imageStore) importImage(ctx context.Context, src imageSource, tags, digests []string, now int64) (imageRecord, error) {
	var cf v1.ConfigFile
	if err := json.Unmarshal(src.config, &cf); err != nil {
		return imageRecord{}, fmt.Errorf("image config: %w", err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return imageRecord{}, fmt.Errorf("image config: os %q is not linux", cf.OS)
	}
	if len(cf.RootFS.DiffIDs) != len(src.layers) {
		return imageRecord{}, fmt.Errorf("image config lists %d layers, the manifest %d", len(cf.RootFS.DiffIDs), len(src.layers))
	}
	id := fmt.Sprintf("sha256:%x", sha256.Sum256(src.config))
	rec := imageRecord{ID: id, RepoTags: tags, RepoDigests: digests, Size: uint64(len(src.config)), Stored: now}
	if src.manifest != nil {
		rec.ManifestDigest = src.manifestDigest.String()
	}
	if !cf.Created.IsZero() {
		rec.Created = cf.Created.UnixNano()
	}
	c := cf.Config
	rec.Config = imageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, StopSignal: c.StopSignal}

	var diffIDs []string
	for _, d := range cf.RootFS.DiffIDs {
		diffIDs = append(diffIDs, d.String())
	}
	defer s.hold(diffIDs)()
	stats := make([]layerfs.Stats, len(src.layers))
	errs := make([]error, len(src.layers))
	sem := make(chan struct{}, maxParallelLayers)
	var wg sync.WaitGroup
	for i, open := range src.layers {
		diffID := cf.RootFS.DiffIDs[i].String()
		rec.Layers = append(rec.Layers, diffID)
		if st, ok := s.haveLayer(diffID); ok {
			stats[i] = st
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			if err := ctx.Err(); err != nil {
				errs[i] = err
				return
			}
			stats[i], errs[i] = s.addLayer(diffID, func() (readCloser, error) { return open() })
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return imageRecord{}, fmt.Errorf("layer %d of %d: %w", i+1, len(errs), err)
		}
	}
	seen := map[string]bool{}
	for i, st := range stats {
		if !seen[rec.Layers[i]] {
			seen[rec.Layers[i]] = true
			rec.Size += st.Size
		}
	}
	if err := s.writeBlob(v1.Hash{Algorithm: "sha256", Hex: digestHex(id)}, src.config); err != nil {
		return imageRecord{}, err
	}
	if src.manifest != nil {
		if err := s.writeBlob(src.manifestDigest, src.manifest); err != nil {
			return imageRecord{}, err
		}
	}
	if err := s.putImage(&rec); err != nil {
		return imageRecord{}, err
	}
	r, _ := s.get(id)
	return r, nil
}

// sourceFromImage adapts a go-containerregistry image.
func sourceFromImage(img v1.Image) (imageSource, error) {
	cfg, err := img.RawConfigFile()
	if err != nil {
		return imageSource{}, fmt.Errorf("read image config: %w", err)
	}
	man, err := img.RawManifest()
	if err != nil {
		return imageSource{}, fmt.Errorf("read image manifest: %w", err)
	}
	dig, err := img.Digest()
	if err != nil {
		return imageSource{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return imageSource{}, fmt.Errorf("read image layers: %w", err)
	}
	src := imageSource{config: cfg, manifest: man, manifestDigest: dig}
	for _, l := range layers {
		src.layers = append(src.layers, l.Uncompressed)
	}
	return src, nil
}

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

// registryName is the registry part of a normalized reference: Docker Hub
// is "docker.io", as the kubelet and containerd write it.
func registryName(r name.Reference) string {
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		return "docker.io"
	}
	return reg
}

// normalizeRef returns the canonical form of an image reference:
// registry/repository:tag (":latest" when no tag is given) or
// registry/repository@digest, e.g. "busybox" -> "docker.io/library/busybox:latest".
func normalizeRef(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", err
	}
	repo := registryName(r) + "/" + r.Context().RepositoryStr()
	if d, ok := r.(name.Digest); ok {
		return repo + "@" + d.DigestStr(), nil
	}
	return repo + ":" + r.Identifier(), nil
}

// pull fetches ref from its registry (for this machine's platform) and
// imports it. The returned record carries the reference's tag (if any) and
// the repo digest of the manifest.
func (s *imageStore) pull(ctx context.Context, ref string, auth *runtimeapi.AuthConfig, keys authn.Keychain, now int64) (imageRecord, error) {
	r, err := parseRef(ref)
	if err != nil {
		return imageRecord{}, errInvalid("pull image: field image %q is not a valid reference: %v", ref, err)
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}),
		remote.WithUserAgent("minilet"),
	}
	if a := authenticatorFor(auth); a != nil {
		opts = append(opts, remote.WithAuth(a))
	} else if keys != nil {
		opts = append(opts, remote.WithAuthFromKeychain(keys))
	}
	img, err := remote.Image(r, opts...)
	if err != nil {
		return imageRecord{}, errUnavailable("pull image %q: %v", ref, err)
	}
	src, err := sourceFromImage(img)
	if err != nil {
		return imageRecord{}, errUnavailable("pull image %q: %v", ref, err)
	}
	repo := registryName(r) + "/" + r.Context().RepositoryStr()
	var tags []string
	if _, ok := r.(name.Tag); ok {
		tags = []string{repo + ":" + r.Identifier()}
	}
	digests := []string{repo + "@" + src.manifestDigest.String()}
	rec, err := s.importImage(ctx, src, tags, digests, now)
	if err != nil {
		return imageRecord{}, errUnavailable("pull image %q: %v", ref, err)
	}
	return rec, nil
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

// dockerConfigKeychain resolves registry credentials from docker config.json
// files ({"auths": {"registry": {"auth": base64(user:pass)}}}), read at
// every pull so that edits apply without a restart. The first file with an
// entry for the registry wins; missing files are skipped.
type dockerConfigKeychain struct{ files []string }

type dockerConfigFile struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// Resolve implements authn.Keychain.
func (k dockerConfigKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	want := res.RegistryStr()
	for _, f := range k.files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var cfg dockerConfigFile
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("docker config %s: %w", f, err)
		}
		for key, ac := range cfg.Auths {
			if registryKeyMatches(key, want) {
				if ac.Auth != "" && ac.Username == "" {
					if raw, err := base64.StdEncoding.DecodeString(ac.Auth); err == nil {
						if u, p, ok := strings.Cut(string(raw), ":"); ok {
							ac.Username, ac.Password, ac.Auth = u, p, ""
						}
					}
				}
				return authn.FromConfig(ac), nil
			}
		}
	}
	return authn.Anonymous, nil
}

// registryKeyMatches compares a docker config "auths" key ("host:port",
// "https://host/v1/", "docker.io") with a registry host.
func registryKeyMatches(key, registry string) bool {
	k := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	if i := strings.IndexByte(k, '/'); i >= 0 {
		k = k[:i]
	}
	norm := func(h string) string {
		switch h {
		case "docker.io", "index.docker.io", "registry-1.docker.io":
			return name.DefaultRegistry
		}
		return h
	}
	return norm(k) == norm(registry)
}
