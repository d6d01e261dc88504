// Package images garbage-collects container images the way the kubelet
// does: it watches which images exist and which are in use, and when the
// image filesystem fills past the high threshold it removes unused images,
// least recently used first, until usage is back at the low threshold.
// Images unused for longer than a maximum age go regardless of disk
// usage. Unlike the kubelet, an image a pod is about to start with
// (MarkInUse) is never removed, which closes the race between GC and a
// pod that has just pulled its image.
package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
)

// Event reasons, in the kubelet's words.
const (
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
	EventImageGCFailed       = "ImageGCFailed"
)

// Config configures the image GC.
type Config struct {
	Policy // what to collect and when; not defaulted
	// Period between GC passes. Default 5m (the kubelet's ImageGCPeriod).
	Period time.Duration
	// DetectPeriod between refreshes of the image list (for Images and
	// lastUsed). Default 30s.
	DetectPeriod time.Duration
	// StateDir holds the first-detected and last-used times across
	// restarts. "" keeps them in memory only.
	StateDir string
}

// ImageService is the part of the CRI ImageManagerService GC uses.
type ImageService interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
}

// ContainerLister lists the runtime's containers (running or not); their
// images count as in use.
type ContainerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// Deps are the GC's collaborators.
type Deps struct {
	Images     ImageService    // required
	Containers ContainerLister // required
	Disk       DiskStats       // required, e.g. StatfsDisk{Runtime: imageService}
	// Recorder gets FreeDiskSpaceFailed, InvalidDiskCapacity and
	// ImageGCFailed on Node. Default events.Nop.
	Recorder events.Recorder
	Node     runtime.Object   // the node the events are about (*v1.Node or a reference)
	Clock    clock.WithTicker // default the real clock
	Logger   *slog.Logger     // default discards
}

// ImageRecord is what GET /images shows for one image.
type ImageRecord struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags"`
	RepoDigests []string `json:"repoDigests,omitempty"`
	Size        int64    `json:"size"`
	Pinned      bool     `json:"pinned"`
	// FirstDetected is zero for images that were there before the agent
	// first ran (the kubelet's "unknown, in the past").
	FirstDetected time.Time `json:"firstDetected,omitzero"`
	LastUsed      time.Time `json:"lastUsed,omitzero"`
}

// record is an image as detection knows it, with its names normalized
// once for matching against containers and pending pods.
type record struct {
	ImageRecord
	keys       []string
	generation uint64
}

// setNames updates the tags and digests, renormalizing only on change.
func (r *record) setNames(tags, digests []string) {
	if r.keys != nil && slices.Equal(tags, r.RepoTags) && slices.Equal(digests, r.RepoDigests) {
		return
	}
	r.RepoTags, r.RepoDigests = tags, digests
	r.keys = make([]string, 0, 1+len(tags)+len(digests))
	r.keys = append(r.keys, Normalize(r.ID))
	for _, n := range tags {
		r.keys = append(r.keys, Normalize(n))
	}
	for _, n := range digests {
		r.keys = append(r.keys, Normalize(n))
	}
}

// GC is the image garbage collector. Its methods are safe for
// concurrent use.
type GC struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	clock clock.WithTicker
	began time.Time

	passMu sync.Mutex // one GC pass or reclaim at a time

	mu          sync.Mutex // guards the fields below
	records     map[string]*record
	generation  uint64    // detection count, to find vanished images
	initialized bool      // a detection has completed
	dirty       bool      // records changed since the last save
	lastSave    time.Time // when the state file was last written

	pendMu  sync.Mutex // held across each removal, so MarkInUse cannot interleave
	pending map[string]int
}

// NewGC validates the policy and loads the saved state.
func NewGC(cfg Config, deps Deps) (*GC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("image GC policy: %w", err)
	}
	if deps.Images == nil || deps.Containers == nil || deps.Disk == nil {
		return nil, fmt.Errorf("%w: image GC: Images, Containers and Disk are required", errdefs.ErrInvalidArgument)
	}
	if cfg.Period < 0 {
		return nil, fmt.Errorf("%w: image GC: Period %v must not be negative", errdefs.ErrInvalidArgument, cfg.Period)
	}
	if cfg.DetectPeriod < 0 {
		return nil, fmt.Errorf("%w: image GC: DetectPeriod %v must not be negative", errdefs.ErrInvalidArgument, cfg.DetectPeriod)
	}
	if cfg.Period == 0 {
		cfg.Period = 5 * time.Minute
	}
	if cfg.DetectPeriod == 0 {
		cfg.DetectPeriod = 30 * time.Second
	}
	if deps.Recorder == nil {
		deps.Recorder = events.Nop{}
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g := &GC{
		cfg: cfg, deps: deps, clock: deps.Clock, began: deps.Clock.Now(),
		log:     deps.Logger.With("component", "imagegc"),
		records: map[string]*record{},
		pending: map[string]int{},
	}
	saved, _, err := loadState(cfg.StateDir)
	if err != nil {
		g.log.Warn("starting without saved image GC state", "err", err)
	}
	for id, p := range saved {
		g.records[id] = &record{ImageRecord: ImageRecord{ID: id, FirstDetected: p.FirstDetected, LastUsed: p.LastUsed}}
	}
	return g, nil
}

// Run collects at once, then detects images every DetectPeriod and
// collects every Period until ctx ends. With GC disabled (high threshold 100, no max age) it only
// detects, so Images stays current. The first failure is logged; the
// ImageGCFailed event is for repeated failures, like the kubelet.
func (g *GC) Run(ctx context.Context) {
	if g.cfg.Disabled() {
		g.log.Info("image GC disabled: imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0")
	}
	detect := g.clock.NewTicker(g.cfg.DetectPeriod)
	defer detect.Stop()
	collect := g.clock.NewTicker(g.cfg.Period)
	defer collect.Stop()
	prevFailed := false
	if g.cfg.Disabled() {
		g.refresh(ctx)
	} else {
		// Like the kubelet, collect once right away: a node that boots
		// with a full disk should not wait a period.
		prevFailed = g.collectOnce(ctx, false)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-detect.C():
			g.refresh(ctx)
		case <-collect.C():
			if g.cfg.Disabled() {
				continue
			}
			prevFailed = g.collectOnce(ctx, prevFailed)
		}
	}
}

func (g *GC) refresh(ctx context.Context) {
	if _, err := g.detect(ctx, g.clock.Now()); err != nil && ctx.Err() == nil {
		g.log.Warn("failed to list images", "err", err)
	}
}

// collectOnce runs a pass and reports whether it failed.
func (g *GC) collectOnce(ctx context.Context, prevFailed bool) bool {
	err := g.GarbageCollect(ctx)
	switch {
	case err == nil:
		if prevFailed {
			g.log.Info("image garbage collection succeeded")
		}
		return false
	case ctx.Err() != nil:
		return prevFailed
	case prevFailed:
		g.log.Error("image garbage collection failed multiple times in a row", "err", err)
		g.deps.Recorder.Event(g.deps.Node, v1.EventTypeWarning, EventImageGCFailed, err.Error())
	default:
		g.log.Error("image garbage collection failed once", "err", err)
	}
	return true
}

// GarbageCollect runs one pass: it removes images past the maximum age,
// then, if the image filesystem is at or over the high threshold, unused
// images oldest first until usage is at the low threshold.
func (g *GC) GarbageCollect(ctx context.Context) error {
	g.passMu.Lock()
	defer g.passMu.Unlock()
	now := g.clock.Now()
	cands, err := g.detect(ctx, now)
	if err != nil {
		return err
	}
	fs, err := g.deps.Disk.ImageFsStats(ctx)
	if err != nil {
		return fmt.Errorf("image filesystem stats: %w", err)
	}
	if fs.Capacity <= 0 {
		msg := fmt.Sprintf("invalid capacity %d on image filesystem", fs.Capacity)
		g.deps.Recorder.Event(g.deps.Node, v1.EventTypeWarning, EventInvalidDiskCapacity, msg)
		return fmt.Errorf("%w: %s", errdefs.ErrUnavailable, msg)
	}
	if fs.Available > fs.Capacity {
		g.log.Warn("image filesystem reports more available than capacity", "available", fs.Available, "capacity", fs.Capacity)
	}
	disk := DiskUsage{Capacity: fs.Capacity, Available: fs.Available}
	plan := Decide(g.cfg.Policy, cands, disk, now, g.began)
	if len(plan.Expired) > 0 {
		g.log.Info("removing images unused for longer than the maximum age", "count", len(plan.Expired), "maxAge", g.cfg.MaxAge)
	}
	freed, errExp := g.remove(ctx, plan.Expired, math.MaxInt64)
	need := plan.BytesToFree
	if need == 0 {
		return errExp
	}
	g.log.Info("image filesystem over the high threshold", "usagePercent", disk.UsagePercent(),
		"high", g.cfg.HighThresholdPercent, "bytesToFree", need, "low", g.cfg.LowThresholdPercent)
	more, errLRU := g.remove(ctx, plan.ByLRU, need-freed)
	freed += more
	if err := errors.Join(errExp, errLRU); err != nil {
		return fmt.Errorf("wanted to free %d bytes, but freed %d bytes with errors in image deletion: %w", need, freed, err)
	}
	if freed < need {
		msg := fmt.Sprintf("Failed to garbage collect required amount of images. Attempted to free %d bytes, but only found %d bytes eligible to free.", need, freed)
		g.deps.Recorder.Event(g.deps.Node, v1.EventTypeWarning, EventFreeDiskSpaceFailed, msg)
		return fmt.Errorf("%w: %s", errdefs.ErrResourceExhausted, msg)
	}
	return nil
}

// DeleteUnusedImages removes every image that may be removed (not in use,
// not pinned, past the minimum age), whatever the disk usage: eviction's
// node reclaim under disk pressure. It returns the bytes freed.
func (g *GC) DeleteUnusedImages(ctx context.Context) (int64, error) {
	g.passMu.Lock()
	defer g.passMu.Unlock()
	now := g.clock.Now()
	cands, err := g.detect(ctx, now)
	if err != nil {
		return 0, err
	}
	var victims []*Candidate
	for _, c := range cands {
		if g.cfg.Removable(c, now) {
			victims = append(victims, c)
		}
	}
	SortLRU(victims)
	return g.remove(ctx, victims, math.MaxInt64)
}

// remove removes images in order until want bytes are freed, continuing
// past errors. An image a pod marked in use since detection is skipped.
func (g *GC) remove(ctx context.Context, cands []*Candidate, want int64) (int64, error) {
	var freed int64
	var errs []error
	for _, c := range cands {
		if freed >= want {
			break
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		ok, err := g.removeOne(ctx, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			freed += c.Size
		}
	}
	return freed, errors.Join(errs...)
}

func (g *GC) removeOne(ctx context.Context, c *Candidate) (bool, error) {
	g.mu.Lock()
	var keys []string
	if rec := g.records[c.ID]; rec != nil {
		keys = rec.keys
	}
	g.mu.Unlock()

	g.pendMu.Lock()
	defer g.pendMu.Unlock()
	for _, k := range keys {
		if g.pending[k] > 0 {
			g.log.Info("not removing image a pod is about to use", "image", c.ID)
			return false, nil
		}
	}
	g.log.Info("removing image", "image", c.ID, "size", c.Size)
	if err := g.deps.Images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: c.ID}); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			g.forget(c.ID)
			return false, nil
		}
		return false, fmt.Errorf("remove image %s: %w", c.ID, err)
	}
	g.forget(c.ID)
	return true, nil
}

func (g *GC) forget(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.records, id)
	g.dirty = true
}

// MarkInUse protects an image a pod is about to start with (admitted,
// pulling or creating) from GC until release is called. If GC is
// removing the image at that moment, MarkInUse waits for the removal to
// finish, so a caller that checks for the image after MarkInUse returns
// either finds it protected or pulls it again. release is idempotent.
func (g *GC) MarkInUse(image string) (release func()) {
	key := Normalize(image)
	g.pendMu.Lock()
	g.pending[key]++
	g.pendMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.pendMu.Lock()
			defer g.pendMu.Unlock()
			if g.pending[key]--; g.pending[key] <= 0 {
				delete(g.pending, key)
			}
		})
	}
}

func (g *GC) pendingSet() refSet {
	g.pendMu.Lock()
	defer g.pendMu.Unlock()
	s := make(refSet, len(g.pending))
	for k := range g.pending {
		s[k] = struct{}{}
	}
	return s
}

// Images returns what the last detection saw, sorted by ID.
func (g *GC) Images() []ImageRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.initialized {
		return nil // only the saved state so far, not yet checked against the runtime
	}
	out := make([]ImageRecord, 0, len(g.records))
	for _, r := range g.records {
		c := r.ImageRecord
		c.RepoTags = append([]string(nil), r.RepoTags...)
		c.RepoDigests = append([]string(nil), r.RepoDigests...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
