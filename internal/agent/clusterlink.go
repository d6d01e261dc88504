package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cluster"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/podspec"
)

// clusterLink is what the agent needs from the API server in cluster mode.
type clusterLink interface {
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	FinalizeDeletion(ctx context.Context, pod *v1.Pod) error
	SyncMirrorPod(ctx context.Context, static *v1.Pod) error
	DeleteMirrorPod(ctx context.Context, namespace, name string) error
	CleanupMirrorPods(ctx context.Context, static []*v1.Pod) error
}

// cleanupMirrorPods deletes mirror pods whose static pod is gone (removed
// while the agent was down), in the background.
func (a *Agent) cleanupMirrorPods(ctx context.Context) {
	if a.cluster == nil {
		return
	}
	var static []*v1.Pod
	for _, p := range a.pods.list() {
		if podspec.IsStatic(&p) {
			static = append(static, p.DeepCopy())
		}
	}
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		if err := a.cluster.CleanupMirrorPods(ctx, static); err != nil {
			a.log.Warn("cleaning up mirror pods failed", "err", err)
		}
	}()
}

// startCluster joins the API server named by --kubeconfig: it registers
// the node and keeps its status and lease fresh, adds the API server as a
// pod source and an event sink, and receives pod status. It returns the
// API server's pods to out with the other sources. Standalone mode (no
// --kubeconfig) does nothing.
func (a *Agent) startCluster(ctx context.Context, wg *sync.WaitGroup, out chan<- sourceSnapshot) error {
	if a.cfg.Kubeconfig == "" {
		return nil
	}
	c, err := cluster.New(cluster.Config{
		Kubeconfig:                a.cfg.Kubeconfig,
		NodeName:                  a.cfg.NodeName,
		NodeSource:                a.buildNode,
		NodeStatusUpdateFrequency: a.cfg.NodeStatusUpdateFrequency,
		NodeStatusReportFrequency: a.cfg.NodeStatusReportFrequency,
		EventQPS:                  float32(a.cfg.EventRecordQPS),
		EventBurst:                a.cfg.EventBurst,
		Clock:                     a.clock,
		Logger:                    a.log,
	})
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", a.cfg.Kubeconfig, err)
	}
	w, err := events.NewRetryWriter(events.RetryConfig{}, c.EventSink(), a.clock, a.log)
	if err != nil {
		return err
	}
	w.Start(ctx)
	a.broadcaster.AddSink(w)
	c.Start(ctx)
	a.cluster = c
	a.sources = append(a.sources, cluster.SourceAPI)

	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			c.Stop()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = w.Shutdown(sctx)
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case u := <-c.Updates():
				select {
				case out <- sourceSnapshot{source: u.Source, pods: u.Pods}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return nil
}

// publishStatus sends a pod's new status to the API server (to the mirror
// pod for a static pod) and keeps the mirror pod in step.
func (a *Agent) publishStatus(ctx context.Context, pod *v1.Pod, st v1.PodStatus) {
	if a.cluster == nil {
		return
	}
	if podspec.IsStatic(pod) && pod.DeletionTimestamp == nil {
		if err := a.cluster.SyncMirrorPod(ctx, pod); err != nil {
			a.log.Warn("mirror pod not in step", "pod", podDesc(pod), "err", err)
		}
	}
	a.cluster.SetPodStatus(pod, st)
}

// podGoneForGood tells the API server that a pod it deleted has stopped,
// or removes the mirror of a static pod that went away.
func (a *Agent) podGoneForGood(ctx context.Context, pod *v1.Pod) {
	if a.cluster == nil {
		return
	}
	var err error
	if podspec.IsStatic(pod) {
		err = a.cluster.DeleteMirrorPod(ctx, pod.Namespace, pod.Name)
	} else if pod.Annotations[podspec.AnnotationConfigSource] == cluster.SourceAPI {
		err = a.cluster.FinalizeDeletion(ctx, pod)
	}
	if err != nil {
		a.log.Warn("telling the API server a pod is gone failed", "pod", podDesc(pod), "err", err)
	}
}
