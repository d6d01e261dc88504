package container

import (
	"encoding/json"
	"hash/fnv"

	v1 "k8s.io/api/core/v1"
)

// Hash fingerprints a container spec. The runtime manager records it on
// each container it creates; a running container whose spec no longer
// hashes the same is restarted. Resources are left out, as the kubelet
// leaves them out: they change in place (an in-place resize), and a
// resize restarts a container only where its resizePolicy says so.
func Hash(c *v1.Container) uint64 {
	cp := *c
	cp.Resources = v1.ResourceRequirements{}
	return hashOf(&cp)
}

// SameSpec reports whether a container created with hash still matches
// spec c: by Hash, or by the hash of releases before resources were left
// out (so an upgrade does not restart what runs; such a container matches
// only while its resources are unchanged).
func SameSpec(hash uint64, c *v1.Container) bool {
	return hash == Hash(c) || hash == hashOf(c)
}

func hashOf(c *v1.Container) uint64 {
	b, err := json.Marshal(c)
	if err != nil {
		// A v1.Container always marshals; fall back to its name.
		b = []byte(c.Name)
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}
