// Package config builds minilet's configuration the way the kubelet does:
// a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file given with
// --config, overridden by the flags explicitly set on the command line,
// with the kubelet's defaults for every unset field (and minilet's own
// defaults where they differ: standalone, address 127.0.0.1 and no
// authentication webhook nor authorization webhook; cgroupRoot /minilet). The result, Config, holds typed values (durations,
// resource lists, parsed eviction thresholds) and has been validated.
package config

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/minilet/minilet/internal/eviction"
)

// Config is the validated configuration the agent runs with. Every field
// documents its default.
type Config struct {
	// File is the KubeletConfiguration file read ("" if none).
	File string
	// Raw is the merged, defaulted KubeletConfiguration, for fields minilet
	// does not type here.
	Raw kubeletv1beta1.KubeletConfiguration

	// Identity and paths.
	NodeName        string // --hostname-override, else the host name; lowercased
	NodeIP          net.IP // --node-ip; nil = detect
	RootDir         string // --root-dir; default /var/lib/minilet
	DevicePluginDir string // --device-plugin-dir; default /var/lib/kubelet/device-plugins
	Kubeconfig      string // --kubeconfig; "" = standalone
	// TLS bootstrapping and certificate rotation (cluster mode).
	BootstrapKubeconfig string // --bootstrap-kubeconfig; "" = none
	CertDir             string // --cert-dir; default <root-dir>/pki
	RotateCertificates  bool   // rotateCertificates / --rotate-certificates; default false
	ServerTLSBootstrap  bool   // serverTLSBootstrap; default false

	// Pod sources.
	StaticPodPath      string        // staticPodPath / --pod-manifest-path; "" = none
	ObjectManifestPath string        // --object-manifest-path: ConfigMaps and Secrets of a standalone agent; "" = none
	StaticPodURL       string        // staticPodURL / --manifest-url; "" = none
	StaticPodURLHeader http.Header   // staticPodURLHeader / --manifest-url-header
	FileCheckFrequency time.Duration // fileCheckFrequency; default 20s
	HTTPCheckFrequency time.Duration // httpCheckFrequency; default 20s
	SyncFrequency      time.Duration // syncFrequency; default 1m

	// Runtime.
	ContainerRuntimeEndpoint string        // "" = the embedded runtime
	ImageServiceEndpoint     string        // "" = same as the runtime
	RuntimeRequestTimeout    time.Duration // default 2m
	// Pod DNS.
	ClusterDNS    []string // clusterDNS / --cluster-dns; default none (ClusterFirst pods fall back to Default)
	ClusterDomain string   // clusterDomain / --cluster-domain; default ""
	ResolvConf    string   // resolvConf / --resolv-conf; default /etc/resolv.conf
	// Pod networking of the embedded runtime (CNI).
	CNIConfDir  string   // --cni-conf-dir; default /etc/cni/net.d
	CNIBinDirs  []string // --cni-bin-dir; default /opt/cni/bin, /usr/lib/cni
	CNICacheDir string   // --cni-cache-dir; default <root-dir>/cni/cache

	// The kubelet API.
	Address           net.IP // address / --address; default 127.0.0.1 standalone, 0.0.0.0 in cluster mode
	Port              int    // port / --port: the authenticated HTTPS API; default 10250; 0 = pick a free port
	ReadOnlyPort      int    // readOnlyPort / --read-only-port; default 10255 standalone, 0 (off) in cluster mode
	TLSCertFile       string // tlsCertFile / --tls-cert-file; "" = self-signed under <root-dir>/pki
	TLSPrivateKeyFile string // tlsPrivateKeyFile / --tls-private-key-file
	TLSMinVersion     uint16 // tlsMinVersion; default (and at least) TLS 1.2
	// Authentication and authorization of the HTTPS API.
	ClientCAFile         string        // authentication.x509.clientCAFile / --client-ca-file
	AnonymousAuth        bool          // authentication.anonymous.enabled / --anonymous-auth; default false
	WebhookAuthn         bool          // authentication.webhook.enabled / --authentication-token-webhook; default true in cluster mode
	WebhookAuthnCacheTTL time.Duration // authentication.webhook.cacheTTL; default 2m
	AuthorizationMode    string        // authorization.mode / --authorization-mode; default Webhook in cluster mode, else AlwaysAllow
	AuthorizedTTL        time.Duration // authorization.webhook.cacheAuthorizedTTL; default 5m
	UnauthorizedTTL      time.Duration // authorization.webhook.cacheUnauthorizedTTL; default 30s
	// SystemLogHandler serves /var/log under /logs/ on the HTTPS API:
	// enableDebuggingHandlers and enableSystemLogHandler, both default true.
	SystemLogHandler bool

	// Node status.
	NodeStatusUpdateFrequency time.Duration // default 10s
	NodeStatusReportFrequency time.Duration // default 5m
	MaxPods                   int           // default 110
	NodeStatusMaxImages       int           // nodeStatusMaxImages; default 50, -1 = no limit

	// Cgroups and resources.
	CgroupRoot    string // cgroupRoot / --cgroup-root; default /minilet (the kubelet's is "/")
	CgroupsPerQOS bool   // default true
	FailSwapOn    bool   // failSwapOn / --fail-swap-on; default true in cluster mode, false standalone
	// Graceful node shutdown (logind inhibitor): shutdownGracePeriod,
	// shutdownGracePeriodCriticalPods and shutdownGracePeriodByPodPriority;
	// default 0 and none: off, as the kubelet's.
	ShutdownGracePeriod              time.Duration
	ShutdownGracePeriodCriticalPods  time.Duration
	ShutdownGracePeriodByPodPriority []ShutdownPriorityPeriod
	CgroupDriver                     string        // cgroupfs (default) or systemd
	CPUCFSQuota                      bool          // default true
	CPUCFSQuotaPeriod                time.Duration // default 100ms
	PodPidsLimit                     int64         // default -1 (no limit)
	// SeccompDefault gives containers without a seccompProfile the
	// runtime's default profile instead of Unconfined: seccompDefault /
	// --seccomp-default; default false.
	SeccompDefault         bool
	KubeReserved           v1.ResourceList // default none
	SystemReserved         v1.ResourceList // default none
	EnforceNodeAllocatable []string        // default [pods]

	// Eviction.
	EvictionHard                     []eviction.Threshold // default memory.available<100Mi, nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%
	EvictionSoft                     []eviction.Threshold // default none; each has its GracePeriod
	EvictionPressureTransitionPeriod time.Duration        // default 5m
	EvictionMaxPodGracePeriod        time.Duration        // default 0

	// Images.
	ImageGCHighThresholdPercent int           // default 85
	ImageGCLowThresholdPercent  int           // default 80
	ImageMinimumGCAge           time.Duration // default 2m
	ImageMaximumGCAge           time.Duration // default 0 (off)
	SerializeImagePulls         bool          // default true
	PinnedImages                []string      // --pinned-image; default none
	ImageGCPeriod               time.Duration // --image-gc-period; default 5m
	MaxParallelImagePulls       int           // 0 = unlimited when not serialized; default 0
	RegistryPullQPS             int           // default 5 (0 = unlimited)
	RegistryBurst               int           // default 10

	// Logs and events.
	ContainerLogMaxSize  int64 // bytes; default 10Mi
	ContainerLogMaxFiles int   // default 5
	EventRecordQPS       int   // default 50
	EventBurst           int   // default 100
	// EventSpamKeyPerReason gives each reason of an object its own spam
	// budget (--event-spam-key-per-reason, minilet only); default false:
	// keyed by source, object and type, as client-go's.
	EventSpamKeyPerReason bool
	LogLevel              slog.Level
	// ContainerLogMonitorInterval is how often container logs are checked
	// for rotation; default 10s, at least 3s.
	ContainerLogMonitorInterval time.Duration

	// Ignored lists the configuration file's fields minilet reads but does
	// not act on; the agent warns about each at start.
	Ignored []string
}

// ShutdownPriorityPeriod is one shutdownGracePeriodByPodPriority entry.
type ShutdownPriorityPeriod struct {
	Priority int32
	Period   time.Duration
}
