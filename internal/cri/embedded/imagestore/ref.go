package imagestore

import "github.com/google/go-containerregistry/pkg/name"

// registryName is the registry part of a normalized reference: Docker Hub
// is "docker.io", as the kubelet and containerd write it.
func registryName(r name.Reference) string {
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		return "docker.io"
	}
	return reg
}

// NormalizeRef returns the canonical form of an image reference:
// registry/repository:tag (":latest" when no tag is given) or
// registry/repository@digest, e.g. "busybox" -> "docker.io/library/busybox:latest".
func NormalizeRef(ref string) (string, error) {
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
