// Package agent is minilet's composition root. Run builds every subsystem
// through its constructor, in dependency order, hands each one the
// subsystems it needs as the small interfaces its package declares, starts
// them and waits. It keeps no state of its own: read Run top-down to see
// the whole agent.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/cluster"
	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/downward"
	"github.com/minilet/minilet/internal/eviction"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/kuberuntime"
	"github.com/minilet/minilet/internal/lifecycle"
	"github.com/minilet/minilet/internal/logs"
	"github.com/minilet/minilet/internal/metrics"
	"github.com/minilet/minilet/internal/nodeaddr"
	"github.com/minilet/minilet/internal/nodestatus"
	"github.com/minilet/minilet/internal/pleg"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/podworkers"
	"github.com/minilet/minilet/internal/prober"
	"github.com/minilet/minilet/internal/sdnotify"
	"github.com/minilet/minilet/internal/store"
	"github.com/minilet/minilet/internal/volumes"
)

// sourcesWait bounds how long a starting agent holds the kubelet API back
// for the pod sources' first snapshots (an API server may be slow).
const sourcesWait = 10 * time.Second

// Run starts the agent and blocks until ctx ends or a server fails. Pods
// keep running after it returns: stopping the agent is not stopping the
// pods, and the next Run adopts them.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	if err := privateRootDir(cfg.RootDir, log); err != nil {
		return err
	}
	if cfg.FailSwapOn {
		if err := cm.CheckSwap(cm.ProcSwaps); err != nil {
			return err
		}
	}
	// One agent per root dir, cgroup root and device-plugin dir (the
	// latter two are taken below, before anything there is touched).
	unlock, err := lockRootDir(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	if len(cfg.Ignored) > 0 {
		log.Warn("the configuration file sets fields minilet reads but does not act on; they have no effect",
			"file", cfg.File, "fields", cfg.Ignored)
	}
	ctx, cancel := context.WithCancel(ctx)
	bg := newBackground(ctx)
	// Runs last: whatever returns early, the goroutines end first.
	defer bg.stop(cancel)
	clk := clock.RealClock{}
	reg := metrics.NewRegistry()
	kubeletMetrics, err := metrics.NewKubelet(reg, cfg.NodeName)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	addrs := nodeaddr.Detect(cfg.NodeIP, cfg.NodeName)
	nodeRef := nodeObject(cfg.NodeName)

	// Events: recorder → broadcaster → correlator → log and local store
	// (and, in cluster mode, the API server).
	ev, err := newEvents(ctx, cfg, reg, clk, log)
	if err != nil {
		return err
	}
	defer ev.close(log)
	recorder := ev.recorder

	// Cluster mode: the API server's client, the status publisher and the
	// event sink, before anything records an event. The node loop starts
	// below, once the node can be built.
	link, err := newClusterLink(ctx, bg, cfg, clk, log, ev)
	if err != nil {
		return err
	}
	if link != nil {
		defer func() { cancel(); link.publisher.Wait() }()
	}

	// The container runtime: embedded, or a CRI endpoint.
	cri, closeRuntime, err := newRuntime(ctx, cfg, addrs.IP, log)
	if err != nil {
		return err
	}
	defer closeRuntime()
	runtimeVersion := runtimeVersion(ctx, cri)
	if err := reapOrphanShims(bg, cfg, cri, recorder, nodeRef, reg, log); err != nil {
		return err
	}

	// What the agent knows of pods, with the statuses the last run saved.
	statuses := store.OpenPodStatuses(filepath.Join(cfg.RootDir, "pods"), log)
	pods := lifecycle.NewPods(statuses)

	// Device plugins, then cgroups (which count the devices' resources).
	devices, err := newDevices(cfg, pods, cri, recorder, clk, log)
	if err != nil {
		return err
	}
	if err := devices.Start(ctx); err != nil {
		return heldBy(config.FlagDevicePluginDir, cfg.DevicePluginDir, err)
	}
	bg.onStop(devices.Stop)
	cgroups, err := cm.New(cgroupConfig(cfg, devices, recorder, log))
	if err != nil {
		return err
	}
	defer cgroups.Close()
	if err := cgroups.Start(ctx); err != nil {
		return err
	}

	// Probes read the statuses the core publishes; exec probes run
	// through the runtime.
	probes, err := prober.NewManager(prober.Config{
		Status:        pods,
		Execer:        execer{cri},
		Recorder:      recorder,
		Logger:        log,
		Registerer:    reg,
		LastReadiness: statuses.WasReady,
		LastStarted:   statuses.WasStarted,
	})
	if err != nil {
		return err
	}
	probes.Start(ctx)
	bg.onStop(probes.Stop)

	// Pod volumes: emptyDir, hostPath, and (from the API server) configMap,
	// secret, projected service-account tokens, persistentVolumeClaim;
	// downwardAPI.
	podsDir := filepath.Join(cfg.RootDir, "pods")
	vols, err := volumes.New(volumes.Config{
		PodsDir: podsDir, Objects: podObjects(cfg, link), Clock: clk, Logger: log,
		NodeName: cfg.NodeName,
		Node: downward.Node{HostIP: addrs.IP, Allocatable: func(r v1.ResourceName) (resource.Quantity, bool) {
			q, ok := cgroups.Allocatable()[r]
			return q, ok
		}},
	})
	if err != nil {
		return err
	}

	// The runtime manager carries out what the core decides.
	rm := kuberuntime.New(kuberuntime.Config{
		Runtime:               cri,
		Images:                cri,
		RuntimeName:           runtimeName(cfg),
		Recorder:              recorder,
		Clock:                 clk,
		Logger:                log,
		LogRoot:               filepath.Join(cfg.RootDir, "logs"),
		PodsDir:               podsDir,
		Volumes:               vols,
		Objects:               podObjects(cfg, link),
		HostIP:                addrs.IP,
		ClusterDNS:            cfg.ClusterDNS,
		ClusterDomain:         cfg.ClusterDomain,
		ResolvConf:            cfg.ResolvConf,
		NodeAllocatable:       cgroups.Allocatable(),
		PodCgroups:            cgroups,
		ContainerOptions:      devices,
		MaxParallelImagePulls: kuberuntime.PullParallelism(cfg.SerializeImagePulls, cfg.MaxParallelImagePulls),
		SeccompDefault:        cfg.SeccompDefault,
		SeccompProfileRoot:    filepath.Join(cfg.RootDir, "seccomp"),
		AllowedUnsafeSysctls:  cfg.Raw.AllowedUnsafeSysctls,
	})

	// The core's per-pod steps, run by one worker per pod.
	syncer, err := lifecycle.NewSyncer(lifecycle.SyncerConfig{
		Pods: pods, Runtime: rm, Cgroups: cgroups, Prober: probes,
		Resize:    &lifecycle.ResizeConfig{Cgroups: cgroups, Runtime: rm},
		Publisher: link.publisherOrNil(),
		Volumes:   vols,
		HostIP:    addrs.IP,
		Recorder:  recorder, Clock: clk, Logger: log, Metrics: kubeletMetrics,
	})
	if err != nil {
		return err
	}
	terminated := make(chan types.UID, 256)
	workers := podworkers.New(ctx, podworkers.Config{
		Syncer: syncer, Clock: clk, Logger: log,
		ResyncInterval: cfg.SyncFrequency,
		OnTerminated: func(uid types.UID) {
			select {
			case terminated <- uid:
			default: // housekeeping catches it within 2 s
			}
		},
	})
	defer func() { cancel(); workers.Wait() }() // an early return must not wait forever

	// Image GC, and eviction (which reclaims through it and the runtime
	// manager, and evicts through the workers).
	imageGC, err := images.NewGC(imageGCConfig(cfg), images.Deps{
		Images: cri, Containers: cri, Disk: images.StatfsDisk{Runtime: cri},
		Recorder: recorder, Node: nodeRef, Clock: clk, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("image garbage collection: %w", err)
	}
	bg.run(imageGC.Run)

	// Container logs are rotated by size, as the kubelet's log manager.
	logRotation, err := logs.NewManager(logs.ManagerConfig{
		Runtime: cri, Root: filepath.Join(cfg.RootDir, "logs"),
		Policy:   logs.Policy{MaxSize: cfg.ContainerLogMaxSize, MaxFiles: cfg.ContainerLogMaxFiles},
		Interval: cfg.ContainerLogMonitorInterval, Clock: clk, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("container log rotation: %w", err)
	}
	bg.run(logRotation.Run)
	evictor, err := newEviction(cfg, eviction.Deps{
		Reclaimer: eviction.ReclaimFuncs{
			// Keep the last dead container of live pods (restart counts
			// and back-off live there).
			Containers: func(ctx context.Context) error { return rm.GarbageCollect(ctx, 1, pods.IsGone) },
			Images:     imageGC.DeleteUnusedImages,
		},
		KillPod:    lifecycle.Evict(pods, workers),
		ActivePods: pods.Active,
		Volumes:    vols,
		Recorder:   recorder, Node: nodeRef, Clock: clk, Logger: log,
	}, cgroups)
	if err != nil {
		return err
	}
	bg.run(evictor.Run)

	// Graceful node shutdown: a logind inhibitor lock, and the pods stopped
	// by priority when the node shuts down.
	shutdown, err := newNodeShutdown(cfg, pods, workers, recorder, nodeRef, clk, log)
	if err != nil {
		return err
	}
	if err := shutdown.Start(ctx); err != nil {
		return err
	}
	bg.onStop(shutdown.Stop)

	// PLEG watches the runtime for containers that start and die.
	relister := pleg.New(pleg.Config{Lister: rm, Clock: clk, Logger: log, Changes: runtimeChanges(cri)})

	// The API's ports are bound now: the node reports the HTTPS one.
	api, err := listenAPI(cfg)
	if err != nil {
		return err
	}
	served := false
	defer func() {
		if !served {
			api.close()
		}
	}()
	node := nodestatus.New(nodestatus.Config{
		NodeName: cfg.NodeName, Addresses: addrs, Port: portOf(api.secure.Addr()),
		RuntimeVersion: runtimeVersion,
		Resources:      cgroups, Pressure: evictor, PLEG: relister, Runtime: cri, Clock: clk,
		Images: cri, MaxImages: cfg.NodeStatusMaxImages,
		Recorder: recorder, ShuttingDown: shutdown.ShuttingDown,
	})

	// The sync loop: admission first by the pod's OS and its sysctls
	// (nothing is allocated for a pod that cannot run here), then in the
	// kubelet's order (devices, resource fit, eviction pressure), then
	// images held from GC.
	loop, err := lifecycle.NewLoop(lifecycle.LoopConfig{
		Pods: pods, Workers: workers, Runtime: rm, Prober: probes,
		Cgroups: cgroups, Devices: devices,
		Admitters: []lifecycle.Admitter{
			lifecycle.AdmitFunc(func(_ context.Context, p *v1.Pod, _ []*v1.Pod) (bool, string, string) {
				return shutdown.Admit(p)
			}),
			lifecycle.AdmitFunc(func(_ context.Context, p *v1.Pod, _ []*v1.Pod) (bool, string, string) {
				return podspec.AdmitOS(p)
			}),
			lifecycle.AdmitFunc(func(_ context.Context, p *v1.Pod, _ []*v1.Pod) (bool, string, string) {
				return rm.AdmitSysctls(p)
			}),
			devices,
			lifecycle.AdmitFunc(func(_ context.Context, p *v1.Pod, active []*v1.Pod) (bool, string, string) {
				return cgroups.Admit(p, active)
			}),
			lifecycle.AdmitFunc(func(_ context.Context, p *v1.Pod, _ []*v1.Pod) (bool, string, string) {
				return evictor.Admit(p)
			}),
			images.NewPodHolds(imageGC),
		},
		Sources:   sourceNames(cfg),
		Publisher: link.publisherOrNil(),
		Volumes:   vols,
		Recorder:  recorder, Clock: clk, Logger: log, Metrics: kubeletMetrics,
	})
	if err != nil {
		return err
	}
	// The kubelet's sync-loop health: /healthz and the systemd watchdog.
	healthy := func() error { return loop.Healthy(clk.Now(), lifecycle.HealthThreshold(cfg.SyncFrequency)) }
	notifier, err := sdnotify.New(sdnotify.Config{Healthy: healthy, Clock: clk, Logger: log})
	if err != nil {
		return err
	}

	// The admin socket. (The kubelet API is served once the loop has the
	// sources' pods, below.)
	srvErr := make(chan error, 3)
	if err := serveAdmin(ctx, bg, cfg, cri, srvErr, log); err != nil {
		return err
	}

	// The pod sources, the cluster's node loop, PLEG and probe results
	// feed the loop.
	snapshots, err := startSources(ctx, bg, cfg, link, recorder, nodeRef, log)
	if err != nil {
		return err
	}
	if link != nil {
		if err := link.cluster.Start(ctx, node.Node); err != nil {
			return err
		}
		bg.onStop(link.cluster.Stop)
	}
	bg.run(relister.Run)
	probeEvents := make(chan types.UID, 100)
	bg.run(func(ctx context.Context) { forwardProbeUpdates(ctx, probes.Updates(), probeEvents) })
	objectEvents := make(chan types.UID, 100)
	if link != nil {
		bg.run(func(ctx context.Context) { forwardObjectChanges(ctx, link.cluster.ObjectChanges(), pods, objectEvents) })
	}

	recorder.Event(nodeRef, v1.EventTypeNormal, "Starting", "Starting kubelet.")
	log.Info("minilet started", "node", cfg.NodeName, "rootDir", cfg.RootDir, "runtime", runtimeVersion)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		loop.Run(ctx, lifecycle.Inputs{Snapshots: snapshots, Runtime: relister.Events(), Probes: probeEvents, Terminated: terminated, Objects: objectEvents})
	}()
	// The kubelet API answers once every source's first snapshot is in the
	// loop (or sourcesWait passed), so the first /pods after a restart
	// lists the pods, with their saved statuses, never an empty list.
	// Its ports are bound already: early callers wait in the backlog.
	waitCtx, cancelWait := context.WithTimeout(ctx, sourcesWait)
	if err := pods.WaitForSources(waitCtx, sourceNames(cfg)); err != nil && ctx.Err() == nil {
		log.Warn("serving the kubelet API before every pod source was read", "wait", sourcesWait)
	}
	cancelWait()
	if err := serveAPI(ctx, bg, api, apiViews{
		cfg: cfg, pods: pods, node: node, events: ev.store, cgroups: cgroups,
		devices: devices, images: imageGC, runtime: cri, streams: kuberuntime.NewStreams(rm, cri), healthy: healthy,
	}, link, reg, srvErr, log); err != nil {
		cancel()
		<-loopDone
		return err
	}
	served = true
	// A Type=notify unit starts here: pods adopted, API served.
	notifier.Ready(fmt.Sprintf("serving %d pod(s)", len(pods.List())))
	notifier.Start(ctx)
	defer notifier.Stop()
	defer notifier.Stopping()
	select {
	case <-ctx.Done():
		<-loopDone
		log.Info("minilet stopping; pods keep running")
		return nil
	case err := <-srvErr:
		cancel()
		<-loopDone
		return err
	}
}

// forwardProbeUpdates turns probe result changes into pod events.
// forwardObjectChanges turns a changed ConfigMap or Secret into a sync of
// each pod that reads it, so that its volumes (and a container waiting
// for a missing key) follow at once rather than at the next periodic sync.
func forwardObjectChanges(ctx context.Context, changes <-chan cluster.ObjectRef, pods *lifecycle.Pods, out chan<- types.UID) {
	for {
		select {
		case <-ctx.Done():
			return
		case ref := <-changes:
			for _, p := range pods.List() {
				if p.Namespace != ref.Namespace || !volumes.Uses(&p, ref.Kind, ref.Name) {
					continue
				}
				select {
				case out <- p.UID:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

func forwardProbeUpdates(ctx context.Context, updates <-chan prober.Update, out chan<- types.UID) {
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			select {
			case out <- u.PodUID:
			case <-ctx.Done():
				return
			}
		}
	}
}
