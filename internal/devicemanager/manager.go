// Package devicemanager is minilet's side of the Kubernetes device plugin
// API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): it runs the
// Registration service on <plugin-dir>/kubelet.sock, keeps one endpoint per
// extended resource that streams the plugin's devices (ListAndWatch), hands
// devices to pods at admission (Allocate, PreStartContainer), remembers the
// allocations in a checkpoint so that an agent restart never hands a device
// out twice, and serves the pod-resources API v1.
//
// Real plugins written for the kubelet work unchanged: the directory,
// socket names, protocol and error behaviour follow the kubelet.
package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/hostlock"
)

// Defaults for Config fields left empty.
const (
	// DefaultPluginDir is where the kubelet (and so every existing plugin)
	// expects kubelet.sock and the plugin sockets.
	DefaultPluginDir = "/var/lib/kubelet/device-plugins"
	// KubeletSocket is the Registration socket's file name inside the plugin dir.
	KubeletSocket = "kubelet.sock"
	// LockName is the lock file inside the plugin dir: the agent that
	// serves kubelet.sock there holds it (see Start).
	LockName = "minilet.lock"
	// CheckpointName is the checkpoint's file name inside the plugin dir. It
	// differs from the kubelet's own file so that the two never read each
	// other's (differently shaped) state.
	CheckpointName = "minilet_internal_checkpoint"
	// DefaultGracePeriod is how long a resource whose plugin went away stays
	// in the node's capacity (all devices unhealthy) before it is removed.
	DefaultGracePeriod = 5 * time.Minute
	// DefaultRPCTimeout bounds every call into a plugin.
	DefaultRPCTimeout = 30 * time.Second
)

// Config configures a Manager. Zero values take the documented defaults.
type Config struct {
	// PluginDir holds kubelet.sock, the plugins' sockets and the
	// checkpoint; default DefaultPluginDir. Created with mode 0750.
	PluginDir string
	// PodResourcesSocket is the unix socket path of the pod-resources API
	// v1 (the kubelet uses <root-dir>/pod-resources/kubelet.sock); empty
	// disables the API.
	PodResourcesSocket string
	// GracePeriod is how long a resource outlives its plugin; default
	// DefaultGracePeriod (5 minutes, like the kubelet).
	GracePeriod time.Duration
	// RPCTimeout bounds each call into a plugin; default DefaultRPCTimeout.
	RPCTimeout time.Duration
	// Owner is the agent's root dir, recorded in the plugin dir's lock so
	// that a second agent's error names the first. Default "".
	Owner string
	// PluginWait is how long Allocate waits for a plugin that registered
	// before (in this run or the last one) but is not connected now, e.g.
	// right after an agent restart; default 0: fail at once, like the
	// kubelet. Set it only when admission may block for that long.
	PluginWait time.Duration
	// Running tells which pods still have containers, so that devices are
	// freed only once those have stopped (see Release). Default nil:
	// devices are freed as soon as the caller says so.
	Running RunningPods
	// Recorder receives the manager's events (a pod waiting for a device
	// plugin, a corrupt checkpoint). Default: events are dropped.
	Recorder events.Recorder
	// Node is the object node-level events are recorded on; default none.
	Node *v1.Node
}

// PodLister lists the pods that are active on the node (admitted and not
// yet terminated). The pod-resources API reports these pods.
type PodLister interface {
	ActivePods() []*v1.Pod
}

// PodListerFunc adapts a function to PodLister.
type PodListerFunc func() []*v1.Pod

// ActivePods calls f.
func (f PodListerFunc) ActivePods() []*v1.Pod { return f() }

// Manager is the device manager. Create it with New, then Start it.
type Manager struct {
	cfg   Config
	pods  PodLister
	clock clock.PassiveClock
	log   *slog.Logger

	// allocMu serialises allocations: one pod is admitted at a time, so
	// devices picked for a pod cannot be picked for another while the
	// plugin's Allocate call is in flight.
	allocMu sync.Mutex

	mu          sync.Mutex
	stopped     bool
	endpoints   map[string]*endpoint          // resource → current endpoint
	devices     map[string]map[string]*device // resource → device ID → device
	sortedIDs   map[string][]string           // resource → its device IDs, sorted; replaced, never modified
	allocated   map[string]sets.Set[string]   // resource → IDs held by pods
	podDevs     podDevices                    // who holds what, with the plugin's answers
	listed      chan struct{}                 // closed and replaced when a plugin sends its devices
	updates     uint64                        // ListAndWatch messages applied
	ckptWarning string                        // set when a corrupt checkpoint was moved aside
	mayRun      sets.Set[types.UID]           // pods whose containers may be using their devices
	releasing   sets.Set[types.UID]           // pods gone whose devices wait for their containers to stop

	ckpt *checkpointer

	runCtx context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // endpoint goroutines
	lock   *hostlock.Lock // the plugin dir's, from Start to Stop
	reg    *regServer
	podRes *podResourcesServer
	once   sync.Once
	done   chan struct{}
}

// device is one advertised device; guarded by Manager.mu.
type device struct {
	healthy  bool
	topology *pluginapi.TopologyInfo
	mark     uint64 // last ListAndWatch update that listed it (see sameIDs)
}

// New validates cfg and returns a Manager that has not started yet. pods
// may be nil when the pod-resources API is disabled.
func New(cfg Config, pods PodLister, clk clock.PassiveClock, log *slog.Logger) (*Manager, error) {
	if cfg.PluginDir == "" {
		cfg.PluginDir = DefaultPluginDir
	}
	if !filepath.IsAbs(cfg.PluginDir) {
		return nil, fmt.Errorf("device manager: PluginDir %q must be an absolute path: %w", cfg.PluginDir, errdefs.ErrInvalidArgument)
	}
	if cfg.GracePeriod < 0 {
		return nil, fmt.Errorf("device manager: GracePeriod %v must not be negative: %w", cfg.GracePeriod, errdefs.ErrInvalidArgument)
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.RPCTimeout < 0 {
		return nil, fmt.Errorf("device manager: RPCTimeout %v must not be negative: %w", cfg.RPCTimeout, errdefs.ErrInvalidArgument)
	}
	if cfg.PluginWait < 0 {
		return nil, fmt.Errorf("device manager: PluginWait %v must not be negative: %w", cfg.PluginWait, errdefs.ErrInvalidArgument)
	}
	if cfg.RPCTimeout == 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.PodResourcesSocket != "" && pods == nil {
		return nil, fmt.Errorf("device manager: PodResourcesSocket %q needs a PodLister: %w", cfg.PodResourcesSocket, errdefs.ErrInvalidArgument)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = events.Nop{}
	}
	log = log.With("component", "devicemanager")
	return &Manager{
		cfg:       cfg,
		pods:      pods,
		clock:     clk,
		log:       log,
		endpoints: map[string]*endpoint{},
		devices:   map[string]map[string]*device{},
		sortedIDs: map[string][]string{},
		allocated: map[string]sets.Set[string]{},
		podDevs:   podDevices{},
		mayRun:    sets.New[types.UID](),
		releasing: sets.New[types.UID](),
		listed:    make(chan struct{}),
		ckpt:      newCheckpointer(filepath.Join(cfg.PluginDir, CheckpointName), log),
		done:      make(chan struct{}),
	}, nil
}

// Start takes the plugin directory for this agent (a *hostlock.HeldError
// while another live agent serves there: its kubelet.sock, the plugins'
// sockets and the checkpoint are that agent's), prepares it (removing
// stale sockets so that plugins notice and re-register), restores the
// checkpoint, and serves the Registration service (and the pod-resources
// API when configured) until ctx ends or Stop is called. Call it once.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.PluginDir, 0o750); err != nil {
		return fmt.Errorf("device manager: create plugin dir: %w", err)
	}
	lock, err := hostlock.Acquire(filepath.Join(m.cfg.PluginDir, LockName), hostlock.Self(m.cfg.Owner))
	if err != nil {
		return fmt.Errorf("device manager: plugin dir %s: %w", m.cfg.PluginDir, err)
	}
	if err := removeStaleSockets(m.cfg.PluginDir); err != nil {
		lock.Release()
		return fmt.Errorf("device manager: clean plugin dir %s: %w", m.cfg.PluginDir, err)
	}
	m.lock = lock
	m.restoreCheckpoint()

	m.runCtx, m.cancel = context.WithCancel(ctx)
	m.ckpt.start(m.runCtx)
	reg, err := startRegServer(m.runCtx, m, filepath.Join(m.cfg.PluginDir, KubeletSocket))
	if err != nil {
		m.cancel()
		m.ckpt.stopped()
		m.lock.Release()
		return err
	}
	m.reg = reg
	if m.cfg.PodResourcesSocket != "" {
		pr, err := startPodResourcesServer(m, m.cfg.PodResourcesSocket)
		if err != nil {
			reg.stop()
			m.cancel()
			m.ckpt.stopped()
			m.lock.Release()
			return err
		}
		m.podRes = pr
	}
	m.log.Info("device manager started", "dir", m.cfg.PluginDir)
	return nil
}

// Stop stops serving and disconnects from the plugins (which keep
// running and re-register with the next agent). It is idempotent and
// returns once every goroutine of the manager has finished.
func (m *Manager) Stop() {
	m.once.Do(func() {
		defer close(m.done)
		m.mu.Lock()
		m.stopped = true // no new endpoints from here on
		m.mu.Unlock()
		if m.cancel != nil {
			m.cancel() // ends the endpoint streams and the writer
		}
		if m.reg != nil {
			m.reg.stop()
		}
		if m.podRes != nil {
			m.podRes.stop()
		}
		m.wg.Wait()
		m.mu.Lock()
		eps := make([]*endpoint, 0, len(m.endpoints))
		for _, e := range m.endpoints {
			eps = append(eps, e)
		}
		m.mu.Unlock()
		for _, e := range eps {
			e.stop() // closes the connection
		}
		if m.cancel != nil {
			m.ckpt.stopped() // the writer flushes what is pending first
		}
		m.lock.Release() // last: the checkpoint is written
	})
	<-m.done
}

// Capacity reports every device plugin resource: capacity counts healthy
// and unhealthy devices, allocatable only healthy ones. Resources whose
// plugin has been gone for longer than the grace period are dropped and
// listed in removed (once: Resources and Devices drop them too).
func (m *Manager) Capacity() (capacity, allocatable v1.ResourceList, removed []string) {
	m.mu.Lock()
	removed = m.dropExpiredLocked()
	m.mu.Unlock()
	capacity, allocatable = m.Resources()
	return capacity, allocatable, removed
}

// dropExpiredLocked forgets the resources whose plugin has been gone for
// longer than the grace period and returns their names. The devices pods
// hold stay allocated (the pods still hold them) until the pods go.
func (m *Manager) dropExpiredLocked() []string {
	var removed []string
	now := m.clock.Now()
	for name := range m.devices {
		if e := m.endpoints[name]; e == nil || e.graceExpired(now, m.cfg.GracePeriod) {
			delete(m.devices, name)
			delete(m.sortedIDs, name)
			delete(m.endpoints, name)
			removed = append(removed, name)
		}
	}
	if len(removed) > 0 {
		sort.Strings(removed)
		m.log.Info("device plugin resources removed after grace period", "resources", removed)
		m.saveLocked()
	}
	return removed
}

// Resources reports every device plugin resource whose plugin is
// connected or gone for less than the grace period (it forgets the
// others): capacity counts healthy and unhealthy devices, allocatable
// only healthy ones. Any number of readers may call it.
func (m *Manager) Resources() (capacity, allocatable v1.ResourceList) {
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropExpiredLocked()
	for name, devs := range m.devices {
		healthy := 0
		for _, d := range devs {
			if d.healthy {
				healthy++
			}
		}
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(len(devs)), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(healthy), resource.DecimalSI)
	}
	return capacity, allocatable
}

// InUse counts the devices pods hold, by resource, whether or not their
// plugin is connected (after a restart, they come from the checkpoint).
func (m *Manager) InUse() v1.ResourceList {
	out := v1.ResourceList{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, ids := range m.allocated {
		if ids.Len() > 0 {
			out[v1.ResourceName(name)] = *resource.NewQuantity(int64(ids.Len()), resource.DecimalSI)
		}
	}
	return out
}

// Allocatable reports the healthy device count of every device plugin
// resource. Unlike Capacity it changes nothing, so any number of readers
// (node status, cgroup manager) may call it.
func (m *Manager) Allocatable() v1.ResourceList {
	out := v1.ResourceList{}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for name, devs := range m.devices {
		if e := m.endpoints[name]; e == nil || e.graceExpired(now, m.cfg.GracePeriod) {
			continue
		}
		healthy := 0
		for _, d := range devs {
			if d.healthy {
				healthy++
			}
		}
		out[v1.ResourceName(name)] = *resource.NewQuantity(int64(healthy), resource.DecimalSI)
	}
	return out
}

// DeviceInfo is one device as `minilet get devices` shows it.
type DeviceInfo struct {
	Resource  string    `json:"resource"`
	ID        string    `json:"id"`
	Healthy   bool      `json:"healthy"`
	PodUID    types.UID `json:"podUID,omitempty"`    // the pod holding it, if any
	Container string    `json:"container,omitempty"` // the container holding it, if any
}

// Devices lists every known device, sorted by resource and ID. A device
// reused by several containers of one pod is listed with the first holder.
func (m *Manager) Devices() []DeviceInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropExpiredLocked() // a plugin gone past the grace period lists nothing
	owners := m.podDevs.owners()
	var out []DeviceInfo
	for name, devs := range m.devices {
		for id, d := range devs {
			info := DeviceInfo{Resource: name, ID: id, Healthy: d.healthy}
			if o, ok := owners[name][id]; ok {
				info.PodUID, info.Container = o.pod, o.container
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// ContainerHealth reports the health of the devices allocated to a
// container, in the shape of ContainerStatus.AllocatedResourcesStatus.
// A device no plugin advertises any more is Unknown.
func (m *Manager) ContainerHealth(podUID types.UID, containerName string) []v1.ResourceStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.podDevs.containerDevices(podUID, containerName)
	names := sortedKeys(held)
	out := make([]v1.ResourceStatus, 0, len(names))
	for _, name := range names {
		st := v1.ResourceStatus{Name: v1.ResourceName(name)}
		for _, id := range sets.List(held[name].ids) {
			h := v1.ResourceHealthStatusUnknown
			if d, ok := m.devices[name][id]; ok {
				h = v1.ResourceHealthStatusUnhealthy
				if d.healthy {
					h = v1.ResourceHealthStatusHealthy
				}
			}
			st.Resources = append(st.Resources, v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: h})
		}
		out = append(out, st)
	}
	return out
}

// removeStaleSockets deletes every unix socket directly in dir (the old
// kubelet.sock and plugin sockets); other files stay.
func removeStaleSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
