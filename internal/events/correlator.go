package events

import (
	"fmt"
	"sync"
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
	// SpamBurst is the token bucket size per source, object and type (as
	// client-go's spam filter keys it); default 25.
	SpamBurst int
	// SpamQPS is the bucket's refill rate in events per second; default
	// 1/300 (one every five minutes).
	SpamQPS float64
	// SpamKeyPerReason, when true, gives every reason its own spam bucket
	// (source, object, type and reason), so that a noisy BackOff cannot
	// starve Pulled, Created or Started of the same pod. Default false:
	// one bucket per source, object and type, as client-go's
	// EventSourceObjectSpamFilter (upstream declined a per-reason key).
	SpamKeyPerReason bool
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
// type and reason. It keys aggregation; the spam filter uses it with the
// reason blanked (unless SpamKeyPerReason). Keys are plain structs so that
// lookups build no strings.
type groupKey struct {
	component, host                        string
	kind, namespace, name, uid, apiVersion string
	eventType, reason                      string
}

// spamKey is the spam filter's key for events of group gk.
func (c *Correlator) spamKey(gk groupKey) groupKey {
	if !c.cfg.SpamKeyPerReason {
		gk.reason = ""
	}
	return gk
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
// rate-limits what is left, in the kubelet's order. By default its
// decisions are client-go's (see TestCorrelatorMatchesClientGo); the one
// deliberate difference is aggregation past the limit, where client-go
// forgets an arbitrary message and this correlator a deterministic one.
//
// Recorders run it on their own goroutine, before the broadcaster's
// queue, so events the filter would drop never take a queue slot.
type Correlator struct {
	mu    sync.Mutex // guards the caches
	cfg   CorrelatorConfig
	clock clock.PassiveClock
	group *lru[groupKey, aggRecord]   // aggregation, per source, object, type and reason
	spam  *lru[groupKey, tokenBucket] // spam buckets, keyed by spamKey
	dedup *lru[dedupKey, dedupRecord]
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
		group: newLRU[groupKey, aggRecord](cfg.CacheSize),
		spam:  newLRU[groupKey, tokenBucket](cfg.CacheSize),
		dedup: newLRU[dedupKey, dedupRecord](cfg.CacheSize),
		names: &nameSeq{},
	}, nil
}

// Correlate takes ownership of ev (it may change its name, count, first
// timestamp and message) and returns the event to write, if any. It is
// safe for concurrent use.
func (c *Correlator) Correlate(ev *v1.Event) Result {
	d := c.decide(groupKeyOf(ev), ev.InvolvedObject.FieldPath, ev.Message, ev.LastTimestamp, ev.Name)
	if d.skip {
		return Result{Skip: true}
	}
	if d.combined {
		ev = &v1.Event{
			ObjectMeta:          metav1.ObjectMeta{Namespace: ev.Namespace, Labels: ev.Labels},
			InvolvedObject:      ev.InvolvedObject,
			Reason:              ev.Reason,
			Message:             CombinedPrefix + ev.Message,
			Source:              ev.Source,
			Type:                ev.Type,
			ReportingController: ev.ReportingController,
			ReportingInstance:   ev.ReportingInstance,
		}
	}
	d.apply(ev)
	return Result{Event: ev, Update: d.count > 1}
}

func groupKeyOf(ev *v1.Event) groupKey {
	o := &ev.InvolvedObject
	return groupKey{
		component: ev.Source.Component, host: ev.Source.Host,
		kind: o.Kind, namespace: o.Namespace, name: o.Name, uid: string(o.UID), apiVersion: o.APIVersion,
		eventType: ev.Type, reason: ev.Reason,
	}
}

// decision is what the correlator decided about one occurrence, before any
// v1.Event exists for it: recorders build the event only when it is to be
// written.
type decision struct {
	skip     bool // eaten by the spam filter
	combined bool // write the group's combined event instead of this message
	name     string
	first    metav1.Time
	last     metav1.Time
	count    int32
}

// apply sets the correlated identity on ev.
func (d *decision) apply(ev *v1.Event) {
	ev.Name = d.name
	ev.FirstTimestamp = d.first
	ev.LastTimestamp = d.last
	ev.Count = d.count
}

// decide runs one occurrence (object and reason in gk, its fieldPath,
// message and timestamp) through aggregation, dedup and the spam filter, in
// the kubelet's order. name is the occurrence's own event name, or "" to
// have one generated when a new event starts.
func (c *Correlator) decide(gk groupKey, fieldPath, message string, ts metav1.Time, name string) decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if ts.IsZero() {
		ts = metav1.NewTime(now)
	}
	d := decision{last: ts}
	dk := dedupKey{group: gk, fieldPath: fieldPath, message: message}
	g := c.group.get(gk)
	if g == nil {
		g = c.group.put(gk, aggRecord{})
	}
	if c.aggregate(g, message, now) {
		d.combined, d.last, name = true, metav1.NewTime(now), ""
		dk = dedupKey{group: gk, combined: true}
	}
	// Dedup: an identical earlier event keeps its name and first timestamp
	// and counts up.
	if r := c.dedup.get(dk); r != nil {
		r.count++
		d.name, d.first, d.count = r.name, r.first, r.count
	} else {
		if name == "" {
			name = eventName(gk.name, c.names.next(d.last.UnixNano()))
		}
		d.name, d.first, d.count = name, d.last, 1
		c.dedup.put(dk, dedupRecord{count: 1, first: d.first, name: name})
	}
	sk := c.spamKey(gk)
	b := c.spam.get(sk)
	if b == nil {
		b = c.spam.put(sk, tokenBucket{tokens: float64(c.cfg.SpamBurst), last: now})
	}
	d.skip = !c.allow(b, now)
	return d
}

// aggregate records message in its group and reports whether it must be
// folded into the group's combined event. The group's first
// AggregateMaxEvents-1 distinct messages pass (repeats of them are
// deduplicated as usual); any further distinct message within
// AggregateInterval of the group's last event is combined. (client-go
// evicts an arbitrary remembered message instead, which makes the outcome
// depend on map order.)
func (c *Correlator) aggregate(rec *aggRecord, message string, now time.Time) bool {
	if rec.messages == nil || now.Sub(rec.last) > c.cfg.AggregateInterval {
		*rec = aggRecord{messages: make(map[string]struct{}, 2)}
	}
	rec.last = now
	if _, seen := rec.messages[message]; seen || len(rec.messages) < c.cfg.AggregateMaxEvents-1 {
		rec.messages[message] = struct{}{}
		return false
	}
	return true
}

// allow takes a token from the group's bucket, refilled for the time
// since it was last used.
func (c *Correlator) allow(b *tokenBucket, now time.Time) bool {
	if d := now.Sub(b.last); d > 0 {
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
