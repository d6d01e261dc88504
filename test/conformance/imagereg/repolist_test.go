package imagereg_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// upstreamManifest is test/utils/image/manifest.go of the Kubernetes
// version hack/cluster builds, parsed: registry key (yaml tag) by
// RegistryList field, and image configs by ImageID.
type upstreamManifest struct {
	version string
	keys    map[string]string // field -> yaml key
	images  map[string]upstreamImage
}

type upstreamImage struct{ field, name, tag string }

var (
	kubeRequire = regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes\s+(v\S+)`)
	registryKey = regexp.MustCompile("(?m)^\\s*(\\w+)\\s+string\\s+`yaml:\"(\\w+)\"`")
	imageConfig = regexp.MustCompile(`configs\[(\w+)\]\s*=\s*Config\{list\.(\w+),\s*"([^"]+)",\s*"([^"]+)"\}`)
)

func readUpstreamManifest(t *testing.T) upstreamManifest {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join("..", "..", "..", "hack", "cluster", "go.mod"))
	if err != nil {
		t.Fatalf("read hack/cluster/go.mod: %v", err)
	}
	m := kubeRequire.FindSubmatch(gomod)
	if m == nil {
		t.Fatal("hack/cluster/go.mod requires no k8s.io/kubernetes version")
	}
	version := string(m[1])
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@"+version, "test", "utils", "image", "manifest.go")
	src, err := os.ReadFile(file)
	if err != nil {
		t.Skipf("the Kubernetes source is not in the module cache (cd hack/cluster && go mod download k8s.io/kubernetes): %v", err)
	}
	um := upstreamManifest{version: version, keys: map[string]string{}, images: map[string]upstreamImage{}}
	for _, k := range registryKey.FindAllSubmatch(src, -1) {
		um.keys[string(k[1])] = string(k[2])
	}
	for _, c := range imageConfig.FindAllSubmatch(src, -1) {
		um.images[string(c[1])] = upstreamImage{field: string(c[2]), name: string(c[3]), tag: string(c[4])}
	}
	if len(um.keys) == 0 || len(um.images) == 0 {
		t.Fatalf("%s: found %d registry keys and %d images; has its layout changed?", file, len(um.keys), len(um.images))
	}
	return um
}

// The repo list maps every registry key of manifest.go to our host, and
// each image we serve sits exactly where e2e.test looks for it: the repo
// list's value for the image's key, then manifest.go's name and tag.
func TestRepoListPutsEveryImageWhereE2ETestLooks(t *testing.T) {
	um := readUpstreamManifest(t)
	r := registry(t)

	raw, err := os.ReadFile(r.RepoList())
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]string
	if err := yaml.Unmarshal(raw, &list); err != nil {
		t.Fatalf("repo list %s: %v", r.RepoList(), err)
	}
	for field, key := range um.keys {
		v, ok := list[key]
		if !ok {
			t.Errorf("repo list has no %s (RegistryList.%s): e2e.test would use the upstream registry", key, field)
			continue
		}
		if v != r.Host() && !strings.HasPrefix(v, r.Host()+"/") {
			t.Errorf("repo list: %s is %q, not on %s", key, v, r.Host())
		}
	}
	for key := range list {
		found := false
		for _, k := range um.keys {
			found = found || k == key
		}
		if !found {
			t.Errorf("repo list key %q is not a RegistryList key of manifest.go %s", key, um.version)
		}
	}

	for _, im := range r.Images() {
		up, ok := um.images[im.ID]
		if !ok {
			t.Errorf("%s: manifest.go %s has no image %s", im.Ref, um.version, im.ID)
			continue
		}
		want := list[um.keys[up.field]] + "/" + up.name + ":" + up.tag
		if im.Ref != want {
			t.Errorf("%s is served at %s; e2e.test pulls %s", im.ID, im.Ref, want)
		}
		if im.Key != um.keys[up.field] || im.Name != up.name || im.Tag != up.tag {
			t.Errorf("%s: key/name/tag %s %s %s; manifest.go has %s %s %s", im.ID, im.Key, im.Name, im.Tag, um.keys[up.field], up.name, up.tag)
		}
	}

	// The image the invalid-registry spec pulls must be nowhere.
	inv, ok := um.images["InvalidRegistryImage"]
	if !ok {
		t.Fatal("manifest.go has no InvalidRegistryImage")
	}
	ref := list[um.keys[inv.field]] + "/" + inv.name + ":" + inv.tag
	if _, err := pull(ref, nil); err == nil {
		t.Errorf("%s (InvalidRegistryImage) pulled; the spec expects ErrImagePull", ref)
	} else if !strings.Contains(err.Error(), "NAME_UNKNOWN") {
		t.Errorf("pull %s: %v; want NAME_UNKNOWN", ref, err)
	}
}
