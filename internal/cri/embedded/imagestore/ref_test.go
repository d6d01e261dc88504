package imagestore

import (
	"strings"
	"testing"
)

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                  "docker.io/library/busybox:latest",
		"busybox:1.36":             "docker.io/library/busybox:1.36",
		"index.docker.io/team/app": "docker.io/team/app:latest",
		"localhost:5000/app:v1":    "localhost:5000/app:v1",
		"registry.example/a/b@sha256:" + strings.Repeat("ab", 32): "registry.example/a/b@sha256:" + strings.Repeat("ab", 32),
	} {
		if got, err := NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NormalizeRef("UPPER/case"); err == nil {
		t.Error("NormalizeRef accepted an invalid reference")
	}
}

func TestPins(t *testing.T) {
	id := strings.Repeat("c", 64)
	pins := NewPins([]string{"host", "busybox", id}, func(ref string) bool { return ref == "host" })
	for _, tc := range []struct {
		rec  Record
		want bool
	}{
		{Record{ID: "sha256:x", RepoTags: []string{"docker.io/library/busybox:latest"}}, true},
		{Record{ID: "sha256:" + id}, true},
		{Record{ID: "sha256:y", RepoTags: []string{"docker.io/library/alpine:latest"}}, false},
	} {
		if got := pins.Match(&tc.rec); got != tc.want {
			t.Errorf("Match(%+v) = %v, want %v", tc.rec, got, tc.want)
		}
	}
}

func TestRegistryKeyMatches(t *testing.T) {
	for _, tc := range []struct {
		key, registry string
		want          bool
	}{
		{"https://index.docker.io/v1/", "index.docker.io", true},
		{"docker.io", "index.docker.io", true},
		{"http://127.0.0.1:5000/v2/", "127.0.0.1:5000", true},
		{"127.0.0.1:5001", "127.0.0.1:5000", false},
	} {
		if got := registryKeyMatches(tc.key, tc.registry); got != tc.want {
			t.Errorf("registryKeyMatches(%q, %q) = %v, want %v", tc.key, tc.registry, got, tc.want)
		}
	}
}
