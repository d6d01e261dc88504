package imagereg

import (
	"fmt"
	"os"
	"strings"
)

// A repoKey is one registry key of the e2e framework's image repository
// list (KUBE_TEST_REPO_LIST; the yaml tags of RegistryList in
// k8s.io/kubernetes/test/utils/image/manifest.go), with the path under
// our host that replaces its upstream value.
type repoKey struct {
	key      string
	path     string // "" for the registry root
	upstream string
}

// repoKeys maps every key to our host, keeping upstream's repository path
// so names stay recognisable. Two keys keep their meaning:
//   - invalidRegistry: nothing is ever served under /invalid (the handler
//     answers NAME_UNKNOWN, even to a push), so "should not be able to pull
//     image from invalid registry" sees ErrImagePull, at once rather than
//     after a DNS timeout.
//   - privateRegistry: /k8s-authenticated-test needs basic auth
//     (Registry.PrivateCredentials), as gcr.io/k8s-authenticated-test does.
var repoKeys = []repoKey{
	{"promoterE2eRegistry", "e2e-test-images", "registry.k8s.io/e2e-test-images"},
	{"buildImageRegistry", "build-image", "registry.k8s.io/build-image"},
	{"invalidRegistry", "invalid", "invalid.registry.k8s.io/invalid"},
	{"gcEtcdRegistry", "", "registry.k8s.io"},
	{"gcRegistry", "", "registry.k8s.io"},
	{"sigStorageRegistry", "sig-storage", "registry.k8s.io/sig-storage"},
	{"privateRegistry", "k8s-authenticated-test", "gcr.io/k8s-authenticated-test"},
	{"dockerLibraryRegistry", "library", "docker.io/library"},
	{"cloudProviderGcpRegistry", "cloud-provider-gcp", "registry.k8s.io/cloud-provider-gcp"},
}

// Repository paths with special access rules.
const (
	invalidPath = "invalid"
	privatePath = "k8s-authenticated-test"
)

// repoPrefix is what key maps to on host ("127.0.0.1:PORT/e2e-test-images").
func repoPrefix(host, key string) (string, error) {
	for _, k := range repoKeys {
		if k.key == key {
			if k.path == "" {
				return host, nil
			}
			return host + "/" + k.path, nil
		}
	}
	return "", fmt.Errorf("no registry key %q in the repo list", key)
}

// writeRepoList writes the KUBE_TEST_REPO_LIST yaml for host at file.
func writeRepoList(file, host string) error {
	var b strings.Builder
	b.WriteString("# KUBE_TEST_REPO_LIST for the e2e framework: every registry key on the\n")
	b.WriteString("# loopback registry of test/conformance/imagereg.\n")
	for _, k := range repoKeys {
		p, err := repoPrefix(host, k.key)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s: %s # upstream %s\n", k.key, p, k.upstream)
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
