package imagestore

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// DockerConfigKeychain resolves registry credentials from docker
// config.json files ({"auths": {"registry": {"auth": base64(user:pass)}}}),
// read at every pull so that edits apply without a restart. The first file
// with an entry for the registry wins; missing files are skipped.
type DockerConfigKeychain struct{ Files []string }

type dockerConfigFile struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// Resolve implements authn.Keychain.
func (k DockerConfigKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	want := res.RegistryStr()
	for _, f := range k.Files {
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
