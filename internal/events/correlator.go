package events

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// CombinedPrefix starts the message of an event that stands for several
// similar events with different messages.
const CombinedPrefix = "(combined from similar events): "

// CorrelatorConfig tunes the correlator. Zero values take the defaults,
// which are client-go's.
type CorrelatorConfig struct {
	// CacheSize bounds each of the three caches (aggregation, dedup, spam
	// buckets); default 4096 entries.
	CacheSize int
	// AggregateMaxEvents: the Nth distinct message with the same source,
	// object, type and reason within AggregateInterval, and every new one
	// after it, is folded into one combined event; the first N-1 pass
	// through. Default 10.
	AggregateMaxEvents int
	// AggregateInterval is how long a group of similar events stays open
	// after its last event; default 10 minutes.
	AggregateInterval time.Duration
	// SpamBurst is the token bucket size per source, object, type and
	// reason; default 25.
	SpamBurst int
	// SpamQPS is the bucket's refill rate in events per second; default
	// 1/300 (one every five minutes).
	SpamQPS float64
}

func (c CorrelatorConfig) withDefaults() (CorrelatorConfig, error) {
	if c.CacheSize == 0 {
		c.CacheSize = 4096
	}
	if c.AggregateMaxEvents == 0 {
		c.AggregateMaxEvents = 10
	}
	if c.AggregateInterval == 0 {
		c.AggregateInterval = 10 * time.Minute
	}
	if c.SpamBurst == 0 {
		c.SpamBurst = 25
	}
	if c.SpamQPS == 0 {
		c.SpamQPS = 1.0 / 300
	}
	switch {
	case c.CacheSize < 0:
		return c, fmt.Errorf("correlator: CacheSize %d must be positive: %w", c.CacheSize, errdefs.ErrInvalidArgument)
	case c.AggregateMaxEvents < 0:
		return c, fmt.Errorf("correlator: AggregateMaxEvents %d must be positive: %w", c.AggregateMaxEvents, errdefs.ErrInvalidArgument)
	case c.AggregateInterval < 0:
		return c, fmt.Errorf("correlator: AggregateInterval %s must be positive: %w", c.AggregateInterval, errdefs.ErrInvalidArgument)
	case c.SpamBurst < 0:
		return c, fmt.Errorf("correlator: SpamBurst %d must be positive: %w", c.SpamBurst, errdefs.ErrInvalidArgument)
	case c.SpamQPS < 0:
		return c, fmt.Errorf("correlator: SpamQPS %g must be positive: %w", c.SpamQPS, errdefs.ErrInvalidArgument)
	}
	return c, nil
}

// groupKey identifies events that are "similar": same source, object,
// type and reason. It keys both aggregation and the spam filter. Keys are
// plain structs so that lookups build no strings.
type groupKey struct {
	component, host                          string
	kind, namespace, name, uid, apiVersion string
	eventType, reason                        string
}

// dedupKey identifies identical events; combined marks the single
// aggregate event of a group.
type dedupKey struct {
	group              groupKey
	fieldPath, message string
	combined           bool
}

type aggRecord struct {
	messages map[string]struct{}
	last     time.Time
}

type dedupRecord struct {
	count int32
	first metav1.Time
	name  string
}

type tokenBucket struct {
	tokens float64
	last   time.Time
}

// Result is what the correlator made of one event.
type Result struct {
	// Event is the event to write; nil when Skip.
	Event *v1.Event
	// Update is true when Event repeats one already written (Count > 1):
	// sinks update the event of that name instead of creating one.
	Update bool
	// Skip is true when the spam filter dropped the event.
	Skip bool
}

// Correlator aggregates similar events, counts identical ones and
// rate-limits what is left, in the kubelet's order. Unlike client-go, the
// spam filter's buckets are per reason as well as per object, so a noisy
// BackOff cannot starve Pulled, Created or Started of the same pod.
//
// A Correlator is not safe for concurrent use; the broadcaster calls it
// from its one goroutine.
type Correlator struct {
	cfg   CorrelatorConfig
	clock clock.PassiveClock
	agg   *lru[groupKey, aggRecord]
	dedup *lru[dedupKey, dedupRecord]
	spam  *lru[groupKey, tokenBucket]
	names *nameSeq
}

// NewCorrelator returns a correlator with cfg's limits (zero fields take
// the defaults).
func NewCorrelator(cfg CorrelatorConfig, clk clock.PassiveClock) (*Correlator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Correlator{
		cfg:   cfg,
		clock: clk,
		agg:   newLRU[groupKey, aggRecord](cfg.CacheSize),
		dedup: newLRU[dedupKey, dedupRecord](cfg.CacheSize),
		spam:  newLRU[groupKey, tokenBucket](cfg.CacheSize),
		names: &nameSeq{},
	}, nil
}

// Correlate takes ownership of ev (it may change its name, count and
// first timestamp) and returns the event to write, if any.
func (c *Correlator) Correlate(ev *v1.Event) Result {
	now := c.clock.Now()
	gk := groupKeyOf(ev)
	out, dk := c.aggregate(ev, gk, now)
	c.observe(out, dk)
	if !c.allow(gk, now) {
		return Result{Skip: true}
	}
	return Result{Event: out, Update: out.Count > 1}
}

func groupKeyOf(ev *v1.Event) groupKey {
	o := &ev.InvolvedObject
	return groupKey{
		component: ev.Source.Component, host: ev.Source.Host,
		kind: o.Kind, namespace: o.Namespace, name: o.Name, uid: string(o.UID), apiVersion: o.APIVersion,
		eventType: ev.Type, reason: ev.Reason,
	}
}

// aggregate records ev's message in its group. The group's first
// AggregateMaxEvents-1 distinct messages pass unchanged (and repeats of
// them are deduplicated as usual); any further distinct message within
// AggregateInterval of the group's last event is replaced by one combined
// event, keyed so that later combined events count onto it. (client-go
// evicts an arbitrary remembered message instead, which makes the outcome
// depend on map order.)
func (c *Correlator) aggregate(ev *v1.Event, gk groupKey, now time.Time) (*v1.Event, dedupKey) {
	rec := c.agg.get(gk)
	if rec == nil || now.Sub(rec.last) > c.cfg.AggregateInterval {
		rec = c.agg.put(gk, aggRecord{messages: make(map[string]struct{}, 2)})
	}
	rec.last = now
	if _, seen := rec.messages[ev.Message]; seen || len(rec.messages) < c.cfg.AggregateMaxEvents-1 {
		rec.messages[ev.Message] = struct{}{}
		return ev, dedupKey{group: gk, fieldPath: ev.InvolvedObject.FieldPath, message: ev.Message}
	}
	t := metav1.NewTime(now)
	combined := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      eventName(ev.InvolvedObject.Name, c.names.next(now.UnixNano())),
			Namespace: ev.Namespace,
			Labels:    ev.Labels,
		},
		InvolvedObject:      ev.InvolvedObject,
		Reason:              ev.Reason,
		Message:             CombinedPrefix + ev.Message,
		Source:              ev.Source,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                ev.Type,
		ReportingController: ev.ReportingController,
		ReportingInstance:   ev.ReportingInstance,
	}
	return combined, dedupKey{group: gk, combined: true}
}

// observe folds ev into an identical earlier event: same name and first
// timestamp, count incremented.
func (c *Correlator) observe(ev *v1.Event, dk dedupKey) {
	if r := c.dedup.get(dk); r != nil && r.count > 0 {
		r.count++
		ev.Name = r.name
		ev.FirstTimestamp = r.first
		ev.Count = r.count
		return
	}
	if ev.Count < 1 {
		ev.Count = 1
	}
	c.dedup.put(dk, dedupRecord{count: ev.Count, first: ev.FirstTimestamp, name: ev.Name})
}

// allow takes a token from the group's bucket.
func (c *Correlator) allow(gk groupKey, now time.Time) bool {
	b := c.spam.get(gk)
	if b == nil {
		b = c.spam.put(gk, tokenBucket{tokens: float64(c.cfg.SpamBurst), last: now})
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens += d.Seconds() * c.cfg.SpamQPS
		if max := float64(c.cfg.SpamBurst); b.tokens > max {
			b.tokens = max
		}
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
