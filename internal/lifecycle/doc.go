// Package lifecycle is minilet's pod-lifecycle core: every decision the
// kubelet's sync loop makes about pods, and none of the I/O.
//
// It decides which pods run (admission, in creation order), which pods
// stop (removed from their source, deleted in the API server, evicted,
// left over from an earlier run), what one sync does to a pod's containers
// (sandbox, init containers in order, sidecars, restarts by restart
// policy, liveness and startup failures, crash-loop back-off), how a pod
// terminates (its grace period, the phase it ends in) and what status a
// pod shows. It reaches the world only through the small interfaces in
// ports.go — the runtime, the pod workers, the cgroup manager, the prober,
// the admitters, the status store, the cluster — so its tests drive it
// step by step with fakes and a fake clock.
//
// Three types share the work:
//   - Pods is what the agent knows about pods: the desired specs, pods
//     still leaving, rejections and each pod's last status. The Loop
//     writes it; the API, the prober and eviction read it.
//   - Loop is the one goroutine that decides: it reads source snapshots,
//     runtime and probe events, finished terminations and the
//     housekeeping tick, and hands work to the pod workers.
//   - Syncer runs one step of one pod (sync, terminate, clean up) on
//     that pod's worker: it plans the step, asks the runtime to carry it
//     out and publishes the status that results.
package lifecycle
