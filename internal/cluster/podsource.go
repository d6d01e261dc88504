package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podsource"
	"github.com/minilet/minilet/internal/podspec"
)

// podSource watches the pods bound to the node and sends full snapshots.
type podSource struct {
	c        *Cluster
	informer cache.SharedIndexInformer
	updates  chan podsource.Update
	changed  chan struct{}

	mu sync.Mutex
	// finalized holds the pods FinalizeDeletion is deleting or deleted
	// that the watch still shows: snapshots leave them out, so the sync
	// loop does not take a pod it already let go for a new one and ask
	// for its deletion again while the first DELETE waits for its turn.
	finalized map[types.UID]bool
}

func newPodSource(c *Cluster) *podSource {
	sel := fields.OneTermEqualSelector("spec.nodeName", c.cfg.NodeName).String()
	lw := cache.NewFilteredListWatchFromClient(c.watch.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.FieldSelector = sel })
	inf := cache.NewSharedIndexInformer(lw, &v1.Pod{}, 0, cache.Indexers{})
	s := &podSource{
		c: c, informer: inf, updates: make(chan podsource.Update, 1), changed: make(chan struct{}, 1),
		finalized: map[types.UID]bool{},
	}
	notify := func(any) { s.poke() }
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*v1.Pod); ok {
				s.mu.Lock()
				delete(s.finalized, p.UID)
				s.mu.Unlock()
			}
			s.poke()
		},
	})
	return s
}

func (s *podSource) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Updates delivers the full set of API pods bound to this node each time
// it changes: the pods to run, and apart from them the mirror pods (so
// that the sync loop sees a mirror deleted or replaced at once). The
// first one comes once the informer has listed. Snapshots coalesce: a
// slow reader gets the latest.
func (c *Cluster) Updates() <-chan podsource.Update { return c.pods.updates }

// run drives the informer and turns its changes into snapshots.
func (s *podSource) run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); s.informer.Run(ctx.Done()) }()
	defer func() { <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return
	}
	s.c.log.Info("pods from the API server listed", "node", s.c.cfg.NodeName)
	s.poke()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		pods, mirrors := s.snapshot()
		u := podsource.Update{Source: SourceAPI, Pods: pods, Mirrors: mirrors}
		// Replace an unread snapshot with the newer one.
		select {
		case <-s.updates:
		default:
		}
		select {
		case s.updates <- u:
		case <-ctx.Done():
			return
		}
		s.c.status.poke() // a newer API pod may make a queued status write due
	}
}

// snapshot is the API pods the agent should run (deep copies, oldest
// first, each annotated with its source) and the mirror pods (the
// informer's copies, read only).
func (s *podSource) snapshot() (out, mirrors []*v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.informer.GetStore().List() {
		p, ok := o.(*v1.Pod)
		if !ok {
			continue
		}
		if IsMirrorPod(p) {
			mirrors = append(mirrors, p)
			continue
		}
		if s.finalized[p.UID] {
			continue
		}
		p = p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[podspec.AnnotationConfigSource] = SourceAPI
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreationTimestamp.Equal(&out[j].CreationTimestamp) {
			return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp)
		}
		return out[i].UID < out[j].UID
	})
	return out, mirrors
}

// cached returns the API server's pod namespace/name as last watched.
func (s *podSource) cached(namespace, name string) (*v1.Pod, bool) {
	o, ok, err := s.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := o.(*v1.Pod)
	return p, ok
}

// IsMirrorPod reports whether p is the API server's mirror of a static pod.
func IsMirrorPod(p *v1.Pod) bool {
	_, ok := p.Annotations[podspec.AnnotationConfigMirror]
	return ok
}

// FinalizeDeletion removes a gracefully deleted API pod for good (grace
// period 0, guarded by its UID) once the agent has stopped all of its
// containers. Its last status is written first. A pod already gone is
// not an error.
func (c *Cluster) FinalizeDeletion(ctx context.Context, pod *v1.Pod) error {
	// Claim the pod until the watch reports it gone (the check and the
	// insert under one lock, so the delete handler cannot slip between
	// them and leave the entry behind). A pod claimed already is being
	// deleted, or was: one DELETE per pod.
	c.pods.mu.Lock()
	cur, cached := c.pods.cached(pod.Namespace, pod.Name)
	claim := cached && cur.UID == pod.UID && !c.pods.finalized[pod.UID]
	if claim {
		c.pods.finalized[pod.UID] = true
	}
	c.pods.mu.Unlock()
	if !claim {
		// Deleted already: by us (the watch has not caught up), or the
		// watch saw it go and the caller acted on an older snapshot.
		c.status.forget(pod.UID)
		return nil
	}
	c.status.flushPod(ctx, pod.UID)
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	c.status.forget(pod.UID)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or replaced by a new pod of the same name
	}
	// Not deleted: let the pod back into snapshots, so that the sync loop
	// sees it again and the deletion is retried.
	c.pods.mu.Lock()
	delete(c.pods.finalized, pod.UID)
	c.pods.mu.Unlock()
	c.pods.poke()
	return classify(err, "deleting pod "+pod.Namespace+"/"+pod.Name)
}

// SyncMirrorPod makes the API server's mirror of a static pod match it:
// created when missing, recreated when the static pod's config hash
// changed. A non-mirror pod of the same name is left alone.
func (c *Cluster) SyncMirrorPod(ctx context.Context, static *v1.Pod) error {
	hash := podspec.MirrorHash(static)
	pods := c.client.CoreV1().Pods(static.Namespace)
	if cur, ok := c.pods.cached(static.Namespace, static.Name); ok {
		if !IsMirrorPod(cur) {
			return fmt.Errorf("mirror of static pod %s/%s: a pod of that name exists and is not a mirror pod: %w",
				static.Namespace, static.Name, errdefs.ErrAlreadyExists)
		}
		if cur.Annotations[podspec.AnnotationConfigMirror] == hash && cur.DeletionTimestamp == nil {
			return nil
		}
		if err := c.deleteMirror(ctx, cur); err != nil {
			return err
		}
	}
	owner, err := c.nodeOwner()
	if err != nil {
		return err
	}
	mirror := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: static.Name, Namespace: static.Namespace,
			Labels:          static.Labels,
			Annotations:     map[string]string{},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: *static.Spec.DeepCopy(),
	}
	for k, v := range static.Annotations {
		mirror.Annotations[k] = v
	}
	mirror.Annotations[podspec.AnnotationConfigMirror] = hash
	mirror.Spec.NodeName = c.cfg.NodeName
	_, err = pods.Create(ctx, mirror, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // the watch has not shown it to us yet
	}
	return classify(err, "creating mirror pod "+static.Namespace+"/"+static.Name)
}

// DeleteMirrorPod removes the mirror of a static pod that went away. A
// mirror of another version of the pod is left alone: it belongs to the
// version that replaced this one (whose sync brings it in step), or, if
// none did, the orphan cleanup removes it.
func (c *Cluster) DeleteMirrorPod(ctx context.Context, static *v1.Pod) error {
	c.status.forget(static.UID)
	cur, ok := c.pods.cached(static.Namespace, static.Name)
	if !ok || !isMirrorOf(cur, static) {
		return nil
	}
	return c.deleteMirror(ctx, cur)
}

// isMirrorOf reports whether the API pod p is the mirror of this version
// of the static pod.
func isMirrorOf(p, static *v1.Pod) bool {
	h, ok := p.Annotations[podspec.AnnotationConfigMirror]
	return ok && h == podspec.MirrorHash(static)
}

// CleanupMirrorPods deletes mirror pods whose static pod is not in
// static (left by a static pod removed while the agent was down).
func (c *Cluster) CleanupMirrorPods(ctx context.Context, static []*v1.Pod) error {
	keep := map[string]bool{}
	for _, p := range static {
		keep[p.Namespace+"/"+p.Name] = true
	}
	var firstErr error
	for _, o := range c.pods.informer.GetStore().List() {
		p, ok := o.(*v1.Pod)
		if !ok || !IsMirrorPod(p) || keep[p.Namespace+"/"+p.Name] {
			continue
		}
		if err := c.deleteMirror(ctx, p); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (c *Cluster) deleteMirror(ctx context.Context, mirror *v1.Pod) error {
	err := c.client.CoreV1().Pods(mirror.Namespace).Delete(ctx, mirror.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(mirror.UID)),
	})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return classify(err, "deleting mirror pod "+mirror.Namespace+"/"+mirror.Name)
}

// isStatic reports whether the agent's pod came from a file or URL
// rather than the API server.
func isStatic(p *v1.Pod) bool {
	src := p.Annotations[podspec.AnnotationConfigSource]
	return src != "" && src != SourceAPI
}
