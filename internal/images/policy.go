package images

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

// Policy is the image garbage-collection policy, the kubelet's
// ImageGCPolicy. Zero is a meaningful value for every field, so none is
// defaulted: the caller passes the full policy (the kubelet's defaults
// are 85, 80, 2m and 0).
type Policy struct {
	// HighThresholdPercent is the image-fs usage (percent, 0-100) at or
	// above which GC frees space. 100 disables size-based GC.
	HighThresholdPercent int
	// LowThresholdPercent is the usage GC frees down to (0 to
	// HighThresholdPercent).
	LowThresholdPercent int
	// MinAge is how long an image must have been known before it may be
	// collected (it may have just been pulled for a pod). Not negative;
	// 0 lets any unused image go.
	MinAge time.Duration
	// MaxAge removes images unused for longer than this, whatever the
	// disk usage; it must exceed MinAge. 0 turns it off.
	MaxAge time.Duration
}

// Validate rejects policies the kubelet rejects, with the kubelet's words.
func (p Policy) Validate() error {
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		return fmt.Errorf("%w: invalid HighThresholdPercent %d, must be in range [0-100]", errdefs.ErrInvalidArgument, p.HighThresholdPercent)
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		return fmt.Errorf("%w: invalid LowThresholdPercent %d, must be in range [0-100]", errdefs.ErrInvalidArgument, p.LowThresholdPercent)
	}
	if p.LowThresholdPercent > p.HighThresholdPercent {
		return fmt.Errorf("%w: LowThresholdPercent %d can not be higher than HighThresholdPercent %d", errdefs.ErrInvalidArgument, p.LowThresholdPercent, p.HighThresholdPercent)
	}
	if p.MinAge < 0 {
		return fmt.Errorf("%w: invalid MinAge %v, must not be negative", errdefs.ErrInvalidArgument, p.MinAge)
	}
	if p.MaxAge < 0 {
		return fmt.Errorf("%w: invalid MaxAge %v, must not be negative", errdefs.ErrInvalidArgument, p.MaxAge)
	}
	if p.MaxAge > 0 && p.MaxAge <= p.MinAge {
		return fmt.Errorf("%w: invalid MaxAge %v, must be greater than MinAge %v", errdefs.ErrInvalidArgument, p.MaxAge, p.MinAge)
	}
	return nil
}

// Disabled reports whether periodic GC has nothing to do: size-based GC
// is off (high = 100) and so is age-based GC. Eviction's node reclaim
// still deletes unused images.
func (p Policy) Disabled() bool { return p.HighThresholdPercent >= 100 && p.MaxAge == 0 }

// Candidate is what the decision needs to know about one image.
type Candidate struct {
	ID            string
	Size          int64
	FirstDetected time.Time // zero: present before the agent started
	LastUsed      time.Time // zero: never seen in use
	Pinned        bool
	InUse         bool // a container uses it or a pod is about to
}

// DiskUsage is the image filesystem's capacity and free space in bytes.
type DiskUsage struct {
	Capacity  int64
	Available int64
}

// UsagePercent is the used share of the disk, rounded like the kubelet
// (100 - floor(available*100/capacity)).
func (d DiskUsage) UsagePercent() int {
	if d.Capacity <= 0 {
		return 0
	}
	avail := min(d.Available, d.Capacity)
	return 100 - int(avail*100/d.Capacity)
}

// BytesToFree is how much must go for usage to reach the low threshold,
// or 0 when usage is below the high threshold.
func (p Policy) BytesToFree(d DiskUsage) int64 {
	if d.Capacity <= 0 || d.UsagePercent() < p.HighThresholdPercent {
		return 0
	}
	avail := min(d.Available, d.Capacity)
	return max(d.Capacity*int64(100-p.LowThresholdPercent)/100-avail, 0)
}

// Removable reports whether an image may be removed at all at now: not
// in use, not pinned, not used at or after now, and at least MinAge
// old.
func (p Policy) Removable(c *Candidate, now time.Time) bool {
	if c.InUse || c.Pinned || !c.LastUsed.Before(now) {
		return false
	}
	return p.oldEnough(c, now)
}

func (p Policy) oldEnough(c *Candidate, now time.Time) bool {
	return c.FirstDetected.IsZero() || now.Sub(c.FirstDetected) >= p.MinAge
}

// Expired reports whether an image has gone unused for longer than
// MaxAge. Its last use is LastUsed, or FirstDetected if it was never
// used, or began (when GC started) if it predates the agent. Nothing
// expires before the agent has itself run for MaxAge, so a restart does
// not wipe images whose use it has not seen yet.
func (p Policy) Expired(c *Candidate, now, began time.Time) bool {
	if p.MaxAge == 0 || now.Sub(began) <= p.MaxAge {
		return false
	}
	last := c.LastUsed
	if last.IsZero() {
		last = c.FirstDetected
	}
	if last.IsZero() {
		last = began
	}
	return now.Sub(last) > p.MaxAge
}

// Plan is a GC decision: what to remove, in order.
type Plan struct {
	// Expired are removed unconditionally (MaxAge).
	Expired []*Candidate
	// ByLRU are removed in order until BytesToFree bytes are freed.
	ByLRU []*Candidate
	// BytesToFree is what size-based GC must free (0: under the high
	// threshold, or only expired images go).
	BytesToFree int64
}

// Decide is the whole GC decision as a pure function of the policy, the
// images, the disk usage, now and the time GC began. It does not modify
// the candidates. Expired images are also counted towards BytesToFree:
// the LRU list does not repeat them.
func Decide(p Policy, images []*Candidate, disk DiskUsage, now, began time.Time) Plan {
	var plan Plan
	removable := make([]*Candidate, 0, len(images))
	var expiredBytes int64
	for _, c := range images {
		if !p.Removable(c, now) {
			continue
		}
		if p.Expired(c, now, began) {
			plan.Expired = append(plan.Expired, c)
			expiredBytes += c.Size
			continue
		}
		removable = append(removable, c)
	}
	plan.BytesToFree = p.BytesToFree(disk)
	if plan.BytesToFree <= expiredBytes {
		return plan
	}
	SortLRU(removable)
	plan.ByLRU = removable
	return plan
}

// SortLRU orders images oldest first: by last use, then by first
// detection, then by ID so the order is stable.
func SortLRU(cs []*Candidate) {
	// Sort on precomputed integer keys: comparing time.Time values is
	// the bulk of the cost with thousands of images.
	type keyed struct {
		lastUsed, firstDetected int64
		c                       *Candidate
	}
	ks := make([]keyed, len(cs))
	for i, c := range cs {
		ks[i] = keyed{unixNano(c.LastUsed), unixNano(c.FirstDetected), c}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if a.lastUsed != b.lastUsed {
			return cmp.Compare(a.lastUsed, b.lastUsed)
		}
		if a.firstDetected != b.firstDetected {
			return cmp.Compare(a.firstDetected, b.firstDetected)
		}
		return strings.Compare(a.c.ID, b.c.ID)
	})
	for i := range ks {
		cs[i] = ks[i].c
	}
}

// unixNano maps the zero time ("never" or "before the agent") below
// every real time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}
