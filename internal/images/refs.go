package images

import "strings"

// Normalize turns an image reference into the one spelling the runtime
// and the pod spec agree on, the way Docker names are completed:
// "busybox" is "docker.io/library/busybox:latest", "localhost:5000/app"
// is "localhost:5000/app:latest", a digest drops any tag, and image IDs
// ("sha256:...") stay as they are. It does not validate; see
// kuberuntime for InvalidImageName.
func Normalize(ref string) string {
	if ref == "" || strings.HasPrefix(ref, "sha256:") {
		return ref
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	domain, rest := "", name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		if first := name[:i]; strings.ContainsAny(first, ".:") || first == "localhost" {
			domain, rest = first, name[i+1:]
		}
	}
	if domain == "" || domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	if hasDigest {
		if i := strings.LastIndexByte(rest, ':'); i >= 0 {
			rest = rest[:i]
		}
		return domain + "/" + rest + "@" + digest
	}
	if !strings.Contains(rest, ":") {
		rest += ":latest"
	}
	return domain + "/" + rest
}

// refSet is a set of normalized references.
type refSet map[string]struct{}

func (s refSet) add(ref string) {
	if ref != "" {
		s[Normalize(ref)] = struct{}{}
	}
}

// hasAny reports whether any of the normalized keys is in the set.
func (s refSet) hasAny(keys []string) bool {
	if len(s) == 0 {
		return false
	}
	for _, k := range keys {
		if _, ok := s[k]; ok {
			return true
		}
	}
	return false
}
