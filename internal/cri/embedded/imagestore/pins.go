package imagestore

import "slices"

// Pins are the configured references of pinned images (which image GC
// never removes), in the forms records carry.
type Pins []string

// NewPins normalizes refs (tags, digests or IDs); the host image, which is
// not stored, is left out.
func NewPins(refs []string, isHost func(string) bool) Pins {
	var out Pins
	for _, p := range refs {
		if isHost(p) {
			continue
		}
		if n, err := NormalizeRef(p); err == nil {
			out = append(out, n)
		}
		out = append(out, p)
		if len(p) == 64 && isHex(p) {
			out = append(out, "sha256:"+p)
		}
	}
	return out
}

// Match reports whether rec is pinned.
func (p Pins) Match(rec *Record) bool {
	for _, ref := range p {
		if ref == rec.ID || slices.Contains(rec.RepoTags, ref) || slices.Contains(rec.RepoDigests, ref) {
			return true
		}
	}
	return false
}
