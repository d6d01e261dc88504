// Package kuberuntime drives a container runtime over the CRI to make a
// pod's containers match its spec: it creates the sandbox, runs init
// containers in order, starts, restarts and kills app containers by the
// restart policy, backs off crashing containers, pulls images, stops pods
// with their grace period and garbage-collects dead containers. It is
// minilet's own version of the kubelet's kuberuntime manager.
package kuberuntime

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/volumes"
)

// Runtime is the part of the CRI RuntimeService the manager uses; both
// the embedded runtime and the remote CRI client satisfy it.
type Runtime interface {
	RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error)
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
	PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, containerID string) error
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout []byte, stderr []byte, err error)
	UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error
}

// Images is the part of the CRI ImageManagerService the manager uses.
type Images interface {
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
}

// PodCgroups places pods and containers in cgroups (the QoS manager).
type PodCgroups interface {
	CgroupParent(pod *v1.Pod) string
	ContainerResources(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources
}

// ContainerOptions adds what device plugins allocated to a container.
type ContainerOptions interface {
	RunOptions(pod *v1.Pod, c *v1.Container) (*container.RunOptions, error)
}

// Config holds the manager's dependencies and settings.
type Config struct {
	Runtime Runtime // required
	Images  Images  // required
	// Recorder receives the kubelet's container events. Default: events.Nop.
	Recorder events.Recorder
	// Clock drives back-off. Default: the real clock.
	Clock clock.Clock
	// Logger default: discards.
	Logger *slog.Logger
	// LogRoot is where container logs go: each sandbox logs to
	// LogRoot/<ns>_<name>_<uid>. Required.
	LogRoot string
	// PodsDir holds per-pod data; emptyDir volumes live in
	// PodsDir/<uid>/volumes/kubernetes.io~empty-dir/<name>, termination
	// message files in PodsDir/<uid>/containers/<name>/<id>. Required for
	// pods with emptyDir volumes; without it containers get no termination
	// message file.
	PodsDir string
	// HostIP is the node's IP for status.hostIP env vars and hook hosts.
	HostIP string
	// NodeAllocatable answers resourceFieldRef env vars of containers
	// without a limit. Default: the machine's CPUs and memory.
	NodeAllocatable v1.ResourceList
	// RuntimeHandler is passed to RunPodSandbox. Default "".
	RuntimeHandler string
	// MaxParallelImagePulls bounds concurrent image pulls: 0 (default)
	// or 1 serializes them like the kubelet's serializeImagePulls, -1
	// removes the limit. See PullParallelism.
	MaxParallelImagePulls int
	// RuntimeName is the Type of the container IDs the manager reports
	// (the "containerd" of "containerd://<id>"). Default "minilet".
	RuntimeName string
	// SeccompDefault gives containers without a seccompProfile
	// RuntimeDefault instead of Unconfined (the kubelet's seccompDefault).
	SeccompDefault bool
	// SeccompProfileRoot is where Localhost seccomp profiles are, as the
	// kubelet's <root-dir>/seccomp. Required for Localhost profiles.
	SeccompProfileRoot string
	// AllowedUnsafeSysctls are sysctls (or "prefix*") pods may set beyond
	// the safe set; default none.
	AllowedUnsafeSysctls []string

	// Volumes says where each pod volume is on the host (the lifecycle
	// syncer has set them up before containers start). Default: a
	// volumes.Manager over PodsDir with no object source.
	Volumes VolumePaths
	// Objects serves configMap and secret references in env; nil = none
	// (a standalone agent).
	Objects volumes.Objects

	// ClusterDNS are the cluster's DNS servers for dnsPolicy ClusterFirst
	// (clusterDNS); none: such pods fall back to Default, with the
	// kubelet's MissingClusterDNS event.
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain (clusterDomain), e.g.
	// cluster.local; "" adds no cluster search domains.
	ClusterDomain string
	// ResolvConf is the node's resolv.conf that dnsPolicy Default copies
	// (resolvConf); "" gives such pods no name servers.
	ResolvConf string

	// StateLostSince: an exited container marked ContainerStateLost gets
	// its event only if it exited at or after this time (earlier runs
	// reported theirs). Default: when this process started.
	StateLostSince time.Time

	// Optional hooks; nil means none.
	PodCgroups       PodCgroups
	ContainerOptions ContainerOptions
}

// Manager syncs pods over the CRI. Its methods are safe for concurrent use
// on different pods; calls for one pod must be serial (the pod worker's
// job).
type Manager struct {
	cfg          Config
	log          *slog.Logger
	clock        clock.Clock
	imageBackoff *pullBackoff
	pulls        pullLimiter
	hookClient   *http.Client

	msgMu sync.Mutex
	msgs  map[string]string // container ID → termination message of an exited container

	lostMu   sync.Mutex
	lostSeen map[string]bool // container IDs whose ContainerStateLost event was recorded
}

// The kubelet's image pull back-off (and the retry of a failed start):
// 10 s doubling to 5 min.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 300 * time.Second
)

// New returns a manager. Missing optional dependencies get their defaults.
func New(cfg Config) *Manager {
	if cfg.Recorder == nil {
		cfg.Recorder = events.Nop{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RuntimeName == "" {
		cfg.RuntimeName = "minilet"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.StateLostSince.IsZero() {
		cfg.StateLostSince = processStart
	}
	if cfg.Volumes == nil {
		cfg.Volumes = noVolumes{}
		if v, err := volumes.New(volumes.Config{PodsDir: cfg.PodsDir, Logger: cfg.Logger}); err == nil {
			cfg.Volumes = v
		}
	}
	return &Manager{
		cfg:          cfg,
		log:          cfg.Logger.With("component", "kuberuntime"),
		clock:        cfg.Clock,
		imageBackoff: newPullBackoff(cfg.Clock),
		pulls:        newPullLimiter(cfg.MaxParallelImagePulls),
		msgs:         map[string]string{},
		lostSeen:     map[string]bool{},
		// HTTP hooks talk to the pod directly: no proxy, and like the
		// kubelet they do not verify https certificates.
		hookClient: &http.Client{Transport: &http.Transport{
			Proxy:             nil,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // pods serve self-signed certs; the kubelet skips verification too
			DisableKeepAlives: true,
		}},
	}
}
