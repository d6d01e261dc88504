package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// statusRetry is how long a status write that failed (or has no mirror
// pod to go to yet) waits before the next try.
const statusRetry = 2 * time.Second

// statusWorkers is how many pods' status patches may be in flight at
// once. Requests stay within the client's QPS and burst (kubeAPIQPS);
// one at a time, a burst of 110 pods waited about 3 s for its last patch
// on a busy machine (28 ms a round trip).
const statusWorkers = 8

// statusManager writes pod status to the API server from one loop:
// SetPodStatus only records the wish, so callers never wait on the API
// server, and several wishes for one pod coalesce into one patch. Each
// round writes different pods' statuses in parallel (statusWorkers).
type statusManager struct {
	c       *Cluster
	changed chan struct{}
	patches atomic.Int64 // status patches sent

	mu      sync.Mutex
	pending map[types.UID]pendingStatus // not yet written
	written map[types.UID]*v1.Pod       // the API pod as our last patch left it
}

type pendingStatus struct {
	pod    *v1.Pod // the agent's pod (static or API)
	status v1.PodStatus
}

func newStatusManager(c *Cluster) *statusManager {
	return &statusManager{
		c: c, changed: make(chan struct{}, 1),
		pending: map[types.UID]pendingStatus{},
		written: map[types.UID]*v1.Pod{},
	}
}

// SetPodStatus asks for pod's status in the API server to become status.
// It never blocks on the API server: the write happens in the background,
// only if the status differs from what the API server has, and is retried
// until it succeeds or the pod is gone. A static pod's status goes to its
// mirror pod.
func (c *Cluster) SetPodStatus(pod *v1.Pod, status v1.PodStatus) {
	s := c.status
	s.mu.Lock()
	s.pending[pod.UID] = pendingStatus{pod: pod, status: *status.DeepCopy()}
	s.mu.Unlock()
	s.poke()
}

func (s *statusManager) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// run writes pending statuses whenever there are new ones, and retries
// failed ones every statusRetry.
func (s *statusManager) run(ctx context.Context) {
	for {
		var retry <-chan time.Time
		if s.syncAll(ctx) {
			retry = s.c.clock.After(statusRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case <-retry:
		}
	}
}

// syncAll tries every pending status once and reports whether some are
// still pending.
func (s *statusManager) syncAll(ctx context.Context) (left bool) {
	s.mu.Lock()
	uids := make([]types.UID, 0, len(s.pending))
	for uid := range s.pending {
		uids = append(uids, uid)
	}
	s.mu.Unlock()
	sem := make(chan struct{}, statusWorkers)
	var wg sync.WaitGroup
	for _, uid := range uids {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.syncPod(ctx, uid)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0
}

// flushPod writes uid's pending status now, if it has one.
func (s *statusManager) flushPod(ctx context.Context, uid types.UID) { s.syncPod(ctx, uid) }

// forget drops what is known about a pod that is gone.
func (s *statusManager) forget(uid types.UID) {
	s.mu.Lock()
	delete(s.pending, uid)
	delete(s.written, uid)
	s.mu.Unlock()
}

// syncPod writes one pod's pending status.
func (s *statusManager) syncPod(ctx context.Context, uid types.UID) {
	s.mu.Lock()
	p, ok := s.pending[uid]
	s.mu.Unlock()
	if !ok {
		return
	}
	err := s.write(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, still := s.pending[uid]; still && cur.pod == p.pod && statusSame(cur.status, p.status) {
		if err == nil || err == errPodGone {
			delete(s.pending, uid)
		}
		if err == errPodGone {
			delete(s.written, uid)
		}
	}
	if err != nil && err != errPodGone && err != errNoMirror {
		s.c.log.Warn("pod status not written, will retry", "pod", p.pod.Namespace+"/"+p.pod.Name, "err", err)
	}
}

func statusSame(a, b v1.PodStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

var (
	errPodGone  = fmt.Errorf("pod is no longer in the API server")
	errNoMirror = fmt.Errorf("mirror pod not created yet")
)

// write patches the target API pod's status if it differs.
func (s *statusManager) write(ctx context.Context, p pendingStatus) error {
	target, err := s.target(p.pod)
	if err != nil {
		return err
	}
	oldJSON, err := json.Marshal(statusOnly(target.UID, target.Status))
	if err != nil {
		return err
	}
	newJSON, err := json.Marshal(statusOnly(target.UID, mergePodStatus(target.Status, p.status)))
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Pod{})
	if err != nil {
		return fmt.Errorf("status patch for pod %s/%s: %w", target.Namespace, target.Name, err)
	}
	if string(patch) == "{}" {
		return nil // the API server has it already
	}
	// The UID makes the patch fail on a different pod of the same name.
	patch, err = withUID(patch, target.UID)
	if err != nil {
		return err
	}
	s.patches.Add(1)
	got, err := s.c.client.CoreV1().Pods(target.Namespace).Patch(ctx, target.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if isGone(err) {
			return errPodGone
		}
		return classify(err, "patching status of pod "+target.Namespace+"/"+target.Name)
	}
	s.mu.Lock()
	s.written[p.pod.UID] = got
	s.mu.Unlock()
	return nil
}

// target is the API pod p's status belongs on, as fresh as known: the
// response to our last patch or the informer's copy, whichever is newer.
func (s *statusManager) target(p *v1.Pod) (*v1.Pod, error) {
	cached, ok := s.c.pods.cached(p.Namespace, p.Name)
	if isStatic(p) {
		// Only this version's mirror: an older version's status must not
		// land on a newer version's mirror, nor the other way round.
		if !ok || !isMirrorOf(cached, p) {
			return nil, errNoMirror
		}
	} else if !ok || cached.UID != p.UID {
		return nil, errPodGone
	}
	s.mu.Lock()
	w := s.written[p.UID]
	s.mu.Unlock()
	if w != nil && w.UID == cached.UID && newerOrSame(w.ResourceVersion, cached.ResourceVersion) {
		return w, nil
	}
	return cached, nil
}

// newerOrSame compares resource versions as the API server's etcd
// revisions (decimal numbers); unknown formats count as older.
func newerOrSame(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a >= b
}

// kubeletConditions are the pod condition types the node owns; others
// (PodScheduled, readiness gates, DisruptionTarget) belong to other
// writers and are kept as the API server has them.
var kubeletConditions = map[v1.PodConditionType]bool{
	v1.PodReadyToStartContainers: true,
	v1.PodInitialized:            true,
	v1.PodReady:                  true,
	v1.ContainersReady:           true,
}

// mergePodStatus is the status to write: the agent's, plus what other
// writers own in the API server's copy (their conditions, the QoS class
// the API server computed, scheduling and resource claim fields the node
// may not change).
func mergePodStatus(old, want v1.PodStatus) v1.PodStatus {
	out := *want.DeepCopy()
	have := map[v1.PodConditionType]bool{}
	for _, c := range out.Conditions {
		have[c.Type] = true
	}
	for _, c := range old.Conditions {
		if !have[c.Type] && !kubeletConditions[c.Type] {
			out.Conditions = append(out.Conditions, c)
		}
	}
	if out.QOSClass == "" {
		out.QOSClass = old.QOSClass
	}
	out.NominatedNodeName = old.NominatedNodeName
	out.ResourceClaimStatuses = old.ResourceClaimStatuses
	out.ExtendedResourceClaimStatus = old.ExtendedResourceClaimStatus
	out.NodeAllocatableResourceClaimStatuses = old.NodeAllocatableResourceClaimStatuses
	return out
}

func statusOnly(uid types.UID, st v1.PodStatus) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: st}
}

func withUID(patch []byte, uid types.UID) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	m["metadata"] = map[string]any{"uid": string(uid)}
	return json.Marshal(m)
}

func jsonPatchBytes(v any) ([]byte, error) { return json.Marshal(v) }
