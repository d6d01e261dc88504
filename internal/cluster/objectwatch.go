package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// ObjectRef names a ConfigMap or Secret ("ConfigMap" or "Secret") that a
// pod's volume reads.
type ObjectRef struct {
	Kind, Namespace, Name string
}

// objectIdle is how long a watched object stays watched after its last
// read: pods that use it read it at every sync (each minute by default).
const objectIdle = 5 * time.Minute

// objectWatches watches each ConfigMap and Secret the node's pods read,
// one watch per object by name (all the Node authorizer allows), and
// reports changes on ObjectChanges, so that the pods using an object sync
// at once instead of at their next periodic sync (the kubelet waits for
// that one).
type objectWatches struct {
	c       *Cluster
	changes chan ObjectRef

	mu     sync.Mutex
	ctx    context.Context // the cluster's while it runs; nil before and after
	active map[ObjectRef]*objectWatch
	wg     sync.WaitGroup // the watches' goroutines
}

type objectWatch struct {
	cancel   context.CancelFunc
	lastRead time.Time
}

func newObjectWatches(c *Cluster) *objectWatches {
	return &objectWatches{c: c, changes: make(chan ObjectRef, 64), active: map[ObjectRef]*objectWatch{}}
}

// ObjectChanges reports ConfigMaps and Secrets that pods read and that
// changed since.
func (c *Cluster) ObjectChanges() <-chan ObjectRef { return c.objects.changes }

// run starts watches from now on, and stops those no pod read for a while.
func (w *objectWatches) run(ctx context.Context) {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	tick := w.c.clock.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.ctx = nil // no watch starts from now on
			w.mu.Unlock()
			w.wg.Wait()
			return
		case <-tick.C():
			w.expire(w.c.clock.Now())
		}
	}
}

func (w *objectWatches) expire(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ref, ow := range w.active {
		if now.Sub(ow.lastRead) > objectIdle {
			ow.cancel()
			delete(w.active, ref)
		}
	}
}

// read notes that a pod read ref, starting its watch if there is none.
func (w *objectWatches) read(ref ObjectRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ow, ok := w.active[ref]; ok {
		ow.lastRead = w.c.clock.Now()
		return
	}
	if w.ctx == nil || w.ctx.Err() != nil {
		return // not started, or stopped
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.active[ref] = &objectWatch{cancel: cancel, lastRead: w.c.clock.Now()}
	w.wg.Add(1)
	go func() { defer w.wg.Done(); w.watch(ctx, ref) }()
}

// watch runs an informer on the one object and reports its updates and
// its deletion (not its first listing).
func (w *objectWatches) watch(ctx context.Context, ref ObjectRef) {
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
	}
	var obj runtime.Object = &v1.Secret{}
	resource := "secrets"
	if ref.Kind == "ConfigMap" {
		obj, resource = &v1.ConfigMap{}, "configmaps"
	}
	lw := cache.NewFilteredListWatchFromClient(w.c.watch.CoreV1().RESTClient(), resource, ref.Namespace, byName)
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	report := func() {
		select {
		case w.changes <- ref:
		default: // a full queue: pods still sync within their period
		}
	}
	var synced atomic.Bool
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			if synced.Load() { // created after the watch began (a pod waits for it)
				report()
			}
		},
		UpdateFunc: func(o, n any) {
			if om, ok1 := o.(metav1.Object); ok1 {
				if nm, ok2 := n.(metav1.Object); ok2 && om.GetResourceVersion() == nm.GetResourceVersion() {
					return // a resync, not a change
				}
			}
			report()
		},
		DeleteFunc: func(any) { report() },
	})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			synced.Store(true)
		}
	}()
	inf.Run(ctx.Done())
}
