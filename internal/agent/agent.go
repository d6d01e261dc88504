// Package agent is minilet's composition root: it builds every subsystem
// from the configuration, wires them together, and runs the sync loop.
// Read Run top-down to see the whole agent.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/eviction"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/kuberuntime"
	"github.com/minilet/minilet/internal/metrics"
	"github.com/minilet/minilet/internal/nodeaddr"
	"github.com/minilet/minilet/internal/pleg"
	"github.com/minilet/minilet/internal/podworkers"
	"github.com/minilet/minilet/internal/prober"
	"github.com/minilet/minilet/internal/status"
	"github.com/minilet/minilet/internal/store"
)

// The agent's consumer-side views of its subsystems.
type (
	podRuntime interface {
		GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
		GetPods(ctx context.Context) ([]*container.Pod, error)
		SyncPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus) kuberuntime.Result
		KillPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, gracePeriodOverride *int64) error
		GarbageCollect(ctx context.Context, keepPerContainer int, isPodGone func(types.UID) bool) error
	}
	podCgroups interface {
		Admit(pod *v1.Pod, activePods []*v1.Pod) (ok bool, reason, message string)
		EnsurePod(pod *v1.Pod) error
		RemovePod(ctx context.Context, uid types.UID) error
		CleanupOrphans(ctx context.Context, keep map[types.UID]bool) error
		Capacity() v1.ResourceList
		Allocatable() v1.ResourceList
	}
	podDevices interface {
		Allocate(ctx context.Context, pod *v1.Pod) error
		RemovePod(uid types.UID)
	}
	podProber interface {
		AddPod(pod *v1.Pod) error
		StopLivenessAndStartup(pod *v1.Pod)
		RemovePod(pod *v1.Pod)
		CleanupPods(desired map[types.UID]struct{})
		UpdatePodStatus(pod *v1.Pod, s *v1.PodStatus)
	}
)

// Agent is a running minilet.
type Agent struct {
	cfg      *config.Config
	log      *slog.Logger
	clock    clock.WithTicker
	recorder events.Recorder

	runtime     podRuntime
	cri         criRuntime
	cgroups     podCgroups
	cm          *cm.Manager
	devices     podDevices
	devmgr      *devicemanager.Manager
	prober      podProber
	probeMgr    *prober.Manager
	workers     *podworkers.Workers
	pleg        *pleg.PLEG
	statusGen   status.Generator
	events      *store.Events
	broadcaster *events.Broadcaster
	cluster     clusterLink // nil in standalone mode
	imageGC     *images.GC
	eviction    *eviction.Manager
	metrics     *agentMetrics

	pods         *podState
	imageHolds   sync.Map // pod UID -> []func() releasing image GC holds
	startLatency *startLatency
	sources      []string
	sourcesSeen  map[string]bool       // owned by the sync loop
	bg           sync.WaitGroup        // goroutines that stop subsystems at shutdown
	terminated   chan types.UID        // pods whose worker finished; read by the sync loop
	readd        map[types.UID]*v1.Pod // leaving pods to run again once gone; owned by the sync loop
	sourcesReady atomic.Bool           // every source has been read once

	addrs          nodeaddr.Addresses
	port           int
	startedAt      time.Time
	runtimeVersion string
	nodeMu         sync.Mutex
	nodeConds      nodeConditions
	lastGC         time.Time // owned by the sync loop
}

// criRuntime is the CRI runtime under the runtime manager.
type criRuntime interface {
	kuberuntime.Runtime
	kuberuntime.Images
	images.ImageService
	images.FsInfoer
	Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error)
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// Run starts the agent and blocks until ctx ends. Pods keep running after
// it returns: stopping the agent is not stopping the pods.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.RootDir, 0o750); err != nil {
		return fmt.Errorf("--root-dir %s: %w", cfg.RootDir, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clk := clock.RealClock{}
	reg := metrics.NewRegistry()
	a := &Agent{
		cfg: cfg, log: log, clock: clk,
		pods:         newPodState(),
		startLatency: newStartLatency(),
		sourcesSeen:  map[string]bool{},
		readd:        map[types.UID]*v1.Pod{},
		terminated:   make(chan types.UID, 256),
		startedAt:    clk.Now(),
		nodeConds:    nodeConditions{since: map[v1.NodeConditionType]time.Time{}, last: map[v1.NodeConditionType]v1.ConditionStatus{}},
	}
	// Runs last: whatever returns early, background stops finish first.
	defer func() { cancel(); a.bg.Wait() }()
	a.pods.saved = newStatusFiles(filepath.Join(cfg.RootDir, "pods"), log)
	a.addrs = nodeaddr.Detect(cfg.NodeIP, cfg.NodeName)
	var err error
	if a.metrics, err = newAgentMetrics(reg, cfg.NodeName); err != nil {
		return err
	}

	// Events: recorder → broadcaster → correlator → log and local store.
	stopEvents, err := a.startEvents(ctx, reg)
	if err != nil {
		return err
	}
	defer stopEvents()

	// The container runtime and the runtime manager over it.
	cri, closeRuntime, err := newRuntime(ctx, cfg, a.addrs.IP, log)
	if err != nil {
		return err
	}
	defer closeRuntime()
	a.cri = cri
	if v, err := cri.Version(ctx, "v1"); err == nil {
		a.runtimeVersion = v.RuntimeName + "://" + v.RuntimeVersion
	}

	// Device plugins, then cgroups (which report the devices' resources).
	if err := a.startDevices(ctx, log); err != nil {
		return err
	}
	if err := a.startCgroups(ctx, log); err != nil {
		return err
	}

	// Probes read the status the agent publishes.
	if err := a.startProber(ctx, reg, log); err != nil {
		return err
	}

	rm := kuberuntime.New(kuberuntime.Config{
		Runtime:               cri,
		Images:                cri,
		Recorder:              a.recorder,
		Clock:                 clk,
		Logger:                log,
		LogRoot:               filepath.Join(cfg.RootDir, "logs"),
		PodsDir:               filepath.Join(cfg.RootDir, "pods"),
		HostIP:                a.addrs.IP,
		NodeAllocatable:       a.cm.Allocatable(),
		PodCgroups:            a.cm,
		ContainerOptions:      a.devmgr,
		ProbeResults:          probeResults{m: a.probeMgr, prefix: runtimeName(cfg) + "://"},
		MaxParallelImagePulls: kuberuntime.PullParallelism(cfg.SerializeImagePulls, cfg.MaxParallelImagePulls),
	})
	a.runtime = rm
	a.statusGen = status.Generator{RuntimeName: runtimeName(cfg), HostIP: a.addrs.IP, Probes: a.probeMgr}

	// Workers, PLEG, the HTTP API, then the pod sources feed the loop.
	a.workers = podworkers.New(ctx, podworkers.Config{
		Syncer: a, Clock: clk, Logger: log,
		ResyncInterval: cfg.SyncFrequency,
		OnTerminated: func(uid types.UID) {
			select {
			case a.terminated <- uid:
			default: // housekeeping catches it within 2 s
			}
		},
	})
	defer a.workers.Wait()
	a.pleg = pleg.New(pleg.Config{Lister: rm, Clock: clk, Logger: log, Changes: runtimeChanges(cri)})

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	srvErr := make(chan error, 4)
	if err := a.startServer(ctx, &wg, reg, srvErr); err != nil {
		return err
	}
	if err := a.startImageGC(ctx, &wg); err != nil {
		return err
	}
	if err := a.startEviction(ctx, &wg); err != nil {
		return err
	}
	updates, err := a.startSources(ctx, &wg)
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.pleg.Run(ctx) }()

	probeUpdates := make(chan types.UID, 100)
	wg.Add(1)
	go func() { defer wg.Done(); a.forwardProbeUpdates(ctx, probeUpdates) }()

	log.Info("minilet started", "node", cfg.NodeName, "rootDir", cfg.RootDir, "runtime", a.runtimeVersion)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.syncLoop(ctx, updates, a.pleg.Events(), probeUpdates) }()
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

func ipString(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}

// runtimeName is the prefix of container IDs in pod status.
func runtimeName(cfg *config.Config) string {
	if cfg.ContainerRuntimeEndpoint == "" {
		return "minilet"
	}
	return "containerd"
}

// runtimeChanges returns the runtime's change notifications, if it has any.
func runtimeChanges(r any) <-chan struct{} {
	if c, ok := r.(interface{ Changes() <-chan struct{} }); ok {
		return c.Changes()
	}
	return nil
}

// runtimeErr reports whether the runtime answers and says it is ready.
func (a *Agent) runtimeErr() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := a.cri.Status(ctx, false)
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			return errors.New(c.Reason + ": " + c.Message)
		}
	}
	return nil
}

// forwardProbeUpdates turns probe results into pod resyncs.
func (a *Agent) forwardProbeUpdates(ctx context.Context, out chan<- types.UID) {
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-a.probeMgr.Updates():
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

func portOf(addr net.Addr) int {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.Port
	}
	_, p, _ := net.SplitHostPort(addr.String())
	n, _ := strconv.Atoi(p)
	return n
}
