// Package nodestatus builds the Node object the agent reports: labels,
// addresses, capacity and allocatable, the pressure and Ready conditions
// with their transition times, and the node's system info. The read-only
// API serves it at /node; in cluster mode it is what the node status loop
// sends to the API server.
package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/nodeaddr"
	"github.com/minilet/minilet/internal/version"
)

// KubeletVersion is the kubelet version minilet reports: the Kubernetes
// release it follows (from the k8s.io/kubelet module it is built with).
var KubeletVersion = version.Kubelet()

// Resources are the node's capacity and allocatable (the cgroup manager,
// which counts in the device plugins' extended resources).
type Resources interface {
	Capacity() v1.ResourceList
	Allocatable() v1.ResourceList
}

// Pressure says which eviction signals are over their thresholds.
type Pressure interface {
	Conditions() (memory, disk, pid bool)
}

// Relister is PLEG, whose relisting shows the runtime is being watched.
type Relister interface {
	Healthy() (ok bool, sinceLastRelist time.Duration)
}

// RuntimeStatus is the CRI runtime's own readiness.
type RuntimeStatus interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// ImageLister is the runtime's image service, for the node's image list.
type ImageLister interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
}

// maxNamesPerImage caps the names reported for one image, as the kubelet
// does.
const maxNamesPerImage = 5

// Config holds what the node is built from.
type Config struct {
	NodeName  string
	Addresses nodeaddr.Addresses
	// Port is the kubelet port reported as the node's daemon endpoint.
	Port int
	// RuntimeVersion is "<runtime>://<version>".
	RuntimeVersion string

	Resources Resources
	Pressure  Pressure
	PLEG      Relister
	Runtime   RuntimeStatus
	// Images lists the images on the node; nil = none reported.
	Images ImageLister
	// MaxImages (nodeStatusMaxImages) caps status.images, largest images
	// first; -1 = no cap, 0 = none.
	MaxImages int
	// Recorder receives the node's events as the kubelet records them:
	// NodeHasSufficientMemory, NodeReady, NodeNotReady, ... when a
	// condition is first reported and whenever it changes. Default: none.
	Recorder events.Recorder
	// Clock stamps heartbeats and transitions. Default: the real clock.
	Clock clock.Clock
	// ShuttingDown, when set and true, makes the node not Ready: it is
	// shutting down (graceful node shutdown).
	ShuttingDown func() bool
}

// Builder builds the node. Safe for concurrent use.
type Builder struct {
	cfg       Config
	startedAt time.Time

	mu    sync.Mutex
	since map[v1.NodeConditionType]time.Time // when each condition last changed
	last  map[v1.NodeConditionType]v1.ConditionStatus
}

// New returns a Builder; its node's creation time is now.
func New(cfg Config) *Builder {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Recorder == nil {
		cfg.Recorder = events.Nop{}
	}
	return &Builder{
		cfg: cfg, startedAt: cfg.Clock.Now(),
		since: map[v1.NodeConditionType]time.Time{},
		last:  map[v1.NodeConditionType]v1.ConditionStatus{},
	}
}

// Node assembles the node as it is now.
func (b *Builder) Node() *v1.Node {
	now := b.cfg.Clock.Now()
	kernel, osImage := kernelVersion(), osImage()
	return &v1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              b.cfg.NodeName,
			CreationTimestamp: metav1.NewTime(b.startedAt),
			Labels: map[string]string{
				"kubernetes.io/hostname":  b.cfg.NodeName,
				"kubernetes.io/os":        runtime.GOOS,
				"kubernetes.io/arch":      runtime.GOARCH,
				"beta.kubernetes.io/os":   runtime.GOOS,
				"beta.kubernetes.io/arch": runtime.GOARCH,
			},
		},
		Status: v1.NodeStatus{
			Capacity:    b.cfg.Resources.Capacity(),
			Allocatable: b.cfg.Resources.Allocatable(),
			Phase:       v1.NodeRunning,
			Conditions:  b.conditions(now),
			Addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: b.cfg.Addresses.IP},
				{Type: v1.NodeHostName, Address: b.cfg.Addresses.Hostname},
			},
			DaemonEndpoints:  v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: int32(b.cfg.Port)}},
			Images:           b.images(),
			DeclaredFeatures: slices.Clone(DeclaredFeatures),
			NodeInfo: v1.NodeSystemInfo{
				MachineID:               readTrim("/etc/machine-id"),
				SystemUUID:              systemUUID(),
				BootID:                  readTrim("/proc/sys/kernel/random/boot_id"),
				KernelVersion:           kernel,
				OSImage:                 osImage,
				ContainerRuntimeVersion: b.cfg.RuntimeVersion,
				KubeletVersion:          KubeletVersion,
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
			},
		},
	}
}

// DeclaredFeatures are the node features, by their feature gate's name,
// minilet declares in status.declaredFeatures (NodeDeclaredFeatures, GA in
// 1.37), sorted: the API server lets through a pod update that needs one
// (a resize of pod-level resources, of a non-sidecar init container) only
// for a node that declares it, and the scheduler places a pod that needs
// one (a RestartAllContainers restart rule) only on such a node. Each is one minilet carries out.
var DeclaredFeatures = []string{
	"InPlacePodLevelResourcesVerticalScaling",
	"InPlacePodVerticalScalingInitContainers",
	"RestartAllContainersOnContainerExits",
}

// condition is one node condition before its times are filled in; event
// is the reason of the node event the kubelet records when it is reported.
type condition struct {
	typ             v1.NodeConditionType
	status          v1.ConditionStatus
	reason, message string
	event           string
}

// conditions are the pressure conditions and Ready, in the kubelet's
// words, each with the time it last changed.
func (b *Builder) conditions(now time.Time) []v1.NodeCondition {
	conds := []condition{
		{v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "NodeHasSufficientMemory"},
		{v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"},
		{v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "NodeHasSufficientPID"},
		{v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status", "NodeReady"},
	}
	memory, disk, pid := b.cfg.Pressure.Conditions()
	if memory {
		conds[0] = condition{v1.NodeMemoryPressure, v1.ConditionTrue, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", "NodeHasInsufficientMemory"}
	}
	if disk {
		conds[1] = condition{v1.NodeDiskPressure, v1.ConditionTrue, "KubeletHasDiskPressure", "kubelet has disk pressure", "NodeHasDiskPressure"}
	}
	if pid {
		conds[2] = condition{v1.NodePIDPressure, v1.ConditionTrue, "KubeletHasInsufficientPID", "kubelet has insufficient PID available", "NodeHasInsufficientPID"}
	}
	if ready, msg := b.readiness(); !ready {
		conds[3] = condition{v1.NodeReady, v1.ConditionFalse, "KubeletNotReady", msg, "NodeNotReady"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]v1.NodeCondition, 0, len(conds))
	for _, c := range conds {
		if b.last[c.typ] != c.status {
			b.last[c.typ] = c.status
			b.since[c.typ] = now
			b.cfg.Recorder.Event(b.ref(), v1.EventTypeNormal, c.event,
				fmt.Sprintf("Node %s status is now: %s", b.cfg.NodeName, c.event))
		}
		out = append(out, v1.NodeCondition{
			Type: c.typ, Status: c.status, Reason: c.reason, Message: c.message,
			LastHeartbeatTime:  metav1.NewTime(now),
			LastTransitionTime: metav1.NewTime(b.since[c.typ]),
		})
	}
	return out
}

// images are the node's images for its status, as the kubelet reports
// them: largest first, at most MaxImages, each with its digests then its
// tags (at most five names); an image with no name is left out. A runtime that cannot list them leaves the
// list empty for this round.
func (b *Builder) images() []v1.ContainerImage {
	if b.cfg.Images == nil || b.cfg.MaxImages == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := b.cfg.Images.ListImages(ctx, nil)
	if err != nil {
		return nil
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].GetSize() > list[j].GetSize() })
	var out []v1.ContainerImage
	for _, img := range list {
		if b.cfg.MaxImages > 0 && len(out) == b.cfg.MaxImages {
			break
		}
		names := append(append([]string{}, img.GetRepoDigests()...), img.GetRepoTags()...)
		if len(names) == 0 {
			continue // nothing to name it by
		}
		if len(names) > maxNamesPerImage {
			names = names[:maxNamesPerImage]
		}
		out = append(out, v1.ContainerImage{Names: names, SizeBytes: int64(img.GetSize())})
	}
	return out
}

// ref is the node as events name it (the kubelet's reference: the node's
// name as its UID).
func (b *Builder) ref() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.cfg.NodeName, UID: types.UID(b.cfg.NodeName)}}
}

// readiness is the node's Ready condition: PLEG relisted recently and the
// runtime answers and says it is ready.
func (b *Builder) readiness() (bool, string) {
	if b.cfg.ShuttingDown != nil && b.cfg.ShuttingDown() {
		return false, "node is shutting down"
	}
	if ok, since := b.cfg.PLEG.Healthy(); !ok {
		return false, "PLEG is not healthy: pleg was last seen active " + since.Round(time.Second).String() + " ago"
	}
	if err := b.runtimeErr(); err != nil {
		return false, "container runtime is down: " + err.Error()
	}
	return true, ""
}

func (b *Builder) runtimeErr() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := b.cfg.Runtime.Status(ctx, false)
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

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// systemUUID is the machine's SMBIOS UUID, as the kubelet reads it ("" on
// machines without one, such as some VMs).
func systemUUID() string {
	for _, p := range []string{"/sys/class/dmi/id/product_uuid", "/proc/device-tree/system-id", "/proc/device-tree/vm,uuid"} {
		if v := strings.Trim(readTrim(p), "\x00"); v != "" {
			return v
		}
	}
	return ""
}

func kernelVersion() string { return readTrim("/proc/sys/kernel/osrelease") }

func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}
