package podsource

import (
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/podspec"
)

// Update is the full set of pods one source currently defines. Pods are
// sorted by namespace/name; the slice and the pods belong to the receiver.
type Update struct {
	Source string // podspec.SourceFile, podspec.SourceHTTP or podspec.SourceAPI
	Pods   []*v1.Pod
	// Mirrors, from the API server's source only, is the full set of
	// mirror pods it holds for the node's static pods: read only (shared
	// with the source's cache).
	Mirrors []*v1.Pod
}

// ReasonInvalidManifest is the suggested Event reason for an ErrorFunc
// report. No pod exists for a bad manifest, so the agent records a Warning
// Event on its Node (the kubelet only logs these).
const ReasonInvalidManifest = "InvalidManifest"

// ErrorFunc receives manifests that could not become pods: path is the
// file (or URL), err names the field when it can and wraps
// errdefs.ErrInvalidArgument for bad content. A source calls it once per
// distinct problem, not on every resync.
type ErrorFunc func(path string, err error)

// publisher holds what a source last emitted and hands snapshots to one
// consumer without ever blocking the source: the channel holds at most one
// snapshot and a newer one replaces an unread older one (snapshots are full
// sets, so the latest is all that matters).
type publisher struct {
	source string
	ch     chan Update

	mu   sync.Mutex
	sent bool // a snapshot was sent (the first one always is)
	last []types.UID
	seen map[types.UID]time.Time // first-seen time per pod version
}

func newPublisher(source string) *publisher {
	return &publisher{source: source, ch: make(chan Update, 1), seen: map[types.UID]time.Time{}}
}

// publish sends pods when the set differs from the last one sent, or when
// it is the first. It keeps each pod's config.seen annotation stable for as
// long as the same version (UID) stays in the set. It reports whether it sent.
func (p *publisher) publish(pods []*v1.Pod) bool {
	sort.Slice(pods, func(i, j int) bool { return podspec.FullName(pods[i]) < podspec.FullName(pods[j]) })
	uids := make([]types.UID, len(pods))
	for i, pod := range pods {
		uids[i] = pod.UID
	}

	p.mu.Lock()
	seen := make(map[types.UID]time.Time, len(pods))
	for _, pod := range pods {
		if t, ok := p.seen[pod.UID]; ok {
			seen[pod.UID] = t
			pod.Annotations[podspec.AnnotationConfigSeen] = t.UTC().Format(time.RFC3339Nano)
		} else if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[podspec.AnnotationConfigSeen]); err == nil {
			seen[pod.UID] = t
		}
	}
	p.seen = seen
	changed := !p.sent || !equalUIDs(p.last, uids)
	p.last = uids
	p.sent = true
	p.mu.Unlock()

	if !changed {
		return false
	}
	u := Update{Source: p.source, Pods: pods}
	select {
	case p.ch <- u:
	default:
		select { // replace the unread older snapshot
		case <-p.ch:
		default:
		}
		p.ch <- u // single producer: there is room now
	}
	return true
}

func equalUIDs(a, b []types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// errorReporter calls an ErrorFunc once per distinct (path, message) and
// forgets paths that turn good or disappear. Only the source's loop uses it.
type errorReporter struct {
	fn   ErrorFunc
	last map[string]string
	now  map[string]string
}

func newErrorReporter(fn ErrorFunc) *errorReporter {
	return &errorReporter{fn: fn, last: map[string]string{}}
}

// begin starts one full read.
func (r *errorReporter) begin() { r.now = map[string]string{} }

// report records err for path and forwards it if it is new.
func (r *errorReporter) report(path string, err error) {
	msg := err.Error()
	r.now[path] = msg
	if r.last[path] != msg && r.fn != nil {
		r.fn(path, err)
	}
}

// end finishes a full read: paths not reported in it are healthy again.
func (r *errorReporter) end() { r.last, r.now = r.now, nil }
