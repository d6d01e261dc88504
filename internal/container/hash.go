package container

import (
	"encoding/json"
	"hash/fnv"

	v1 "k8s.io/api/core/v1"
)

// Hash fingerprints a container spec. The runtime manager records it on
// each container it creates; a running container whose spec no longer
// hashes the same is restarted.
func Hash(c *v1.Container) uint64 {
	b, err := json.Marshal(c)
	if err != nil {
		// A v1.Container always marshals; fall back to its name.
		b = []byte(c.Name)
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}
