package config

import (
	"time"

	"github.com/spf13/pflag"
)

// Options are the raw command-line values. Flags that map to a
// KubeletConfiguration field override the --config file only when they are
// set explicitly on the command line; the others always apply.
type Options struct {
	ConfigFile string

	// Flags without a KubeletConfiguration field.
	RootDir             string
	DevicePluginDir     string
	HostnameOverride    string
	Kubeconfig          string
	ObjectManifestPath  string
	BootstrapKubeconfig string
	CertDir             string
	NodeIP              string
	LogLevel            string
	Verbosity           int
	PinnedImages        []string      // --pinned-image: never garbage-collected
	ImageGCPeriod       time.Duration // --image-gc-period
	CNIConfDir          string        // --cni-conf-dir
	CNIBinDir           string        // --cni-bin-dir, comma-separated
	CNICacheDir         string        // --cni-cache-dir

	// EventSpamKeyPerReason is --event-spam-key-per-reason (minilet only).
	EventSpamKeyPerReason bool

	// Flags backed by a KubeletConfiguration field (name in brackets).
	PodManifestPath          string            // staticPodPath
	ManifestURL              string            // staticPodURL
	ManifestURLHeader        []string          // staticPodURLHeader, "Key:Value" items
	ContainerRuntimeEndpoint string            // containerRuntimeEndpoint
	Address                  string            // address
	Port                     int32             // port
	ReadOnlyPort             int32             // readOnlyPort
	TLSCertFile              string            // tlsCertFile
	TLSPrivateKeyFile        string            // tlsPrivateKeyFile
	RotateCertificates       bool              // rotateCertificates
	ClientCAFile             string            // authentication.x509.clientCAFile
	AnonymousAuth            bool              // authentication.anonymous.enabled
	AuthenticationWebhook    bool              // authentication.webhook.enabled
	AuthorizationMode        string            // authorization.mode
	CgroupRoot               string            // cgroupRoot
	CgroupsPerQOS            bool              // cgroupsPerQOS
	FailSwapOn               bool              // failSwapOn
	CgroupDriver             string            // cgroupDriver
	KubeReserved             map[string]string // kubeReserved
	SystemReserved           map[string]string // systemReserved
	EvictionHard             string            // evictionHard, "signal<value,..."
	MaxPods                  int32             // maxPods
	ImageGCHighThreshold     int32             // imageGCHighThresholdPercent
	ImageGCLowThreshold      int32             // imageGCLowThresholdPercent
	ImageMinimumGCAge        time.Duration     // imageMinimumGCAge
	FileCheckFrequency       time.Duration     // fileCheckFrequency
	SyncFrequency            time.Duration     // syncFrequency
	PodMaxPids               int64             // podPidsLimit
	SerializeImagePulls      bool              // serializeImagePulls
	ClusterDNS               []string          // clusterDNS
	ClusterDomain            string            // clusterDomain
	ResolvConf               string            // resolvConf
	SeccompDefault           bool              // seccompDefault
}

// Flag names, as the kubelet spells them.
const (
	FlagConfig                   = "config"
	FlagRootDir                  = "root-dir"
	FlagPodManifestPath          = "pod-manifest-path"
	FlagManifestURL              = "manifest-url"
	FlagManifestURLHeader        = "manifest-url-header"
	FlagContainerRuntimeEndpoint = "container-runtime-endpoint"
	FlagAddress                  = "address"
	FlagReadOnlyPort             = "read-only-port"
	FlagPort                     = "port"
	FlagTLSCertFile              = "tls-cert-file"
	FlagTLSPrivateKeyFile        = "tls-private-key-file"
	FlagClientCAFile             = "client-ca-file"
	FlagAnonymousAuth            = "anonymous-auth"
	FlagAuthenticationWebhook    = "authentication-token-webhook"
	FlagAuthorizationMode        = "authorization-mode"
	FlagDevicePluginDir          = "device-plugin-dir"
	FlagCgroupRoot               = "cgroup-root"
	FlagCgroupsPerQOS            = "cgroups-per-qos"
	FlagFailSwapOn               = "fail-swap-on"
	FlagCgroupDriver             = "cgroup-driver"
	FlagHostnameOverride         = "hostname-override"
	FlagKubeconfig               = "kubeconfig"
	FlagObjectManifestPath       = "object-manifest-path"
	FlagBootstrapKubeconfig      = "bootstrap-kubeconfig"
	FlagCertDir                  = "cert-dir"
	FlagRotateCertificates       = "rotate-certificates"
	FlagNodeIP                   = "node-ip"
	FlagKubeReserved             = "kube-reserved"
	FlagSystemReserved           = "system-reserved"
	FlagEvictionHard             = "eviction-hard"
	FlagMaxPods                  = "max-pods"
	FlagImageGCHighThreshold     = "image-gc-high-threshold"
	FlagImageGCLowThreshold      = "image-gc-low-threshold"
	FlagImageMinimumGCAge        = "minimum-image-gc-age"
	FlagFileCheckFrequency       = "file-check-frequency"
	FlagSyncFrequency            = "sync-frequency"
	FlagPodMaxPids               = "pod-max-pids"
	FlagSerializeImagePulls      = "serialize-image-pulls"
	FlagSeccompDefault           = "seccomp-default"
	FlagLogLevel                 = "log-level"
	FlagVerbosity                = "v"
	FlagClusterDNS               = "cluster-dns"
	FlagClusterDomain            = "cluster-domain"
	FlagResolvConf               = "resolv-conf"
	FlagCNIConfDir               = "cni-conf-dir"
	FlagCNIBinDir                = "cni-bin-dir"
	FlagCNICacheDir              = "cni-cache-dir"

	// FlagEventSpamKeyPerReason is minilet's own: the kubelet has no such
	// setting (client-go keys its spam filter without the reason).
	FlagEventSpamKeyPerReason = "event-spam-key-per-reason"
)

// Defaults of minilet-only settings and of those that differ from the kubelet.
const (
	DefaultRootDir         = "/var/lib/minilet"
	DefaultDevicePluginDir = "/var/lib/kubelet/device-plugins"
	DefaultAddress         = "127.0.0.1"
	DefaultClusterAddress  = "0.0.0.0"
	DefaultPort            = 10250
	DefaultReadOnlyPort    = 10255
	// DefaultCgroupRoot keeps minilet's cgroups apart from a kubelet's or
	// systemd's on the same machine (the kubelet's default is "/").
	DefaultCgroupRoot = "/minilet"
	// DefaultCNIConfDir and DefaultCNIBinDir are where containerd and the
	// kubelet of old look; Debian's containernetworking-plugins install
	// into /usr/lib/cni.
	DefaultCNIConfDir = "/etc/cni/net.d"
	DefaultCNIBinDir  = "/opt/cni/bin,/usr/lib/cni"
)

// AddFlags registers the kubelet-named flags on fs, writing into o. Flag
// defaults match the configuration defaults, so --help tells the truth.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringVar(&o.ConfigFile, FlagConfig, "", "KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file; flags set on the command line override it")
	fs.StringVar(&o.RootDir, FlagRootDir, DefaultRootDir, "directory for minilet state: logs, checkpoints, images, sockets and the agent's keys (pki/); made readable by root only (0700)")
	fs.StringVar(&o.PodManifestPath, FlagPodManifestPath, "", "directory (or file) of static pod manifests to run")
	fs.StringVar(&o.ObjectManifestPath, FlagObjectManifestPath, "", "directory of ConfigMap and Secret objects (YAML or JSON) for pods' volumes and env when there is no API server; re-read at every pod sync")
	fs.StringVar(&o.ManifestURL, FlagManifestURL, "", "URL serving static pod manifests (a Pod or PodList)")
	fs.StringSliceVar(&o.ManifestURLHeader, FlagManifestURLHeader, nil, "HTTP headers for --manifest-url, as 'Key:Value' (repeat or comma-separate)")
	fs.StringVar(&o.ContainerRuntimeEndpoint, FlagContainerRuntimeEndpoint, "", "CRI endpoint, e.g. unix:///run/containerd/containerd.sock; empty = the embedded runtime")
	fs.StringVar(&o.Address, FlagAddress, DefaultAddress, "IP address the kubelet API listens on (default "+DefaultClusterAddress+" with --kubeconfig)")
	fs.Int32Var(&o.Port, FlagPort, DefaultPort, "port of the authenticated HTTPS kubelet API; 0 picks a free port")
	fs.Int32Var(&o.ReadOnlyPort, FlagReadOnlyPort, DefaultReadOnlyPort, "port of the unauthenticated read-only HTTP API (pods, stats, metrics, healthz); 0 disables it (the default with --kubeconfig)")
	fs.StringVar(&o.TLSCertFile, FlagTLSCertFile, "", "serving certificate of the HTTPS API (with intermediates); empty = self-signed, kept under <root-dir>/pki")
	fs.StringVar(&o.TLSPrivateKeyFile, FlagTLSPrivateKeyFile, "", "private key of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, FlagClientCAFile, "", "CA bundle that signs the client certificates the HTTPS API accepts")
	fs.BoolVar(&o.AnonymousAuth, FlagAnonymousAuth, false, "let unauthenticated requests reach the HTTPS API as system:anonymous")
	fs.BoolVar(&o.AuthenticationWebhook, FlagAuthenticationWebhook, false, "check bearer tokens with the API server's TokenReview (default true with --kubeconfig)")
	fs.StringVar(&o.AuthorizationMode, FlagAuthorizationMode, "", "AlwaysAllow or Webhook (SubjectAccessReview); default Webhook with --kubeconfig, else AlwaysAllow")
	fs.StringVar(&o.DevicePluginDir, FlagDevicePluginDir, DefaultDevicePluginDir, "directory holding the device plugin registration socket")
	fs.StringVar(&o.CgroupRoot, FlagCgroupRoot, DefaultCgroupRoot, "cgroup under which pod cgroups are created (minilet's default differs from the kubelet's '/')")
	fs.BoolVar(&o.CgroupsPerQOS, FlagCgroupsPerQOS, true, "create the QoS cgroup hierarchy (guaranteed at the root, burstable, besteffort)")
	fs.BoolVar(&o.FailSwapOn, FlagFailSwapOn, false, "refuse to start while swap is on (the kubelet's check); default true with --kubeconfig, as the kubelet's, false standalone")
	fs.StringVar(&o.CgroupDriver, FlagCgroupDriver, "cgroupfs", "cgroup driver: cgroupfs or systemd")
	fs.StringVar(&o.HostnameOverride, FlagHostnameOverride, "", "node name to use instead of the host name")
	fs.StringVar(&o.Kubeconfig, FlagKubeconfig, "", "kubeconfig of an API server to join as a node; empty = standalone")
	fs.StringVar(&o.BootstrapKubeconfig, FlagBootstrapKubeconfig, "", "kubeconfig with credentials to request a client certificate (TLS bootstrapping) when --kubeconfig is missing or expired; --kubeconfig is then written")
	fs.StringVar(&o.CertDir, FlagCertDir, "", "directory of the node's certificates (bootstrapped, rotated, self-signed); default <root-dir>/pki")
	fs.BoolVar(&o.RotateCertificates, FlagRotateCertificates, false, "renew the client certificate from the API server before it expires")
	fs.StringVar(&o.NodeIP, FlagNodeIP, "", "IP address of the node; empty = detect")
	fs.StringToStringVar(&o.KubeReserved, FlagKubeReserved, nil, "resources reserved for Kubernetes daemons, e.g. cpu=100m,memory=256Mi")
	fs.StringToStringVar(&o.SystemReserved, FlagSystemReserved, nil, "resources reserved for the system, e.g. cpu=100m,memory=256Mi")
	fs.StringVar(&o.EvictionHard, FlagEvictionHard, "", "hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10%")
	fs.Int32Var(&o.MaxPods, FlagMaxPods, 110, "maximum number of pods on this node")
	fs.Int32Var(&o.ImageGCHighThreshold, FlagImageGCHighThreshold, 85, "disk usage percent that starts image garbage collection")
	fs.Int32Var(&o.ImageGCLowThreshold, FlagImageGCLowThreshold, 80, "disk usage percent image garbage collection frees down to")
	fs.DurationVar(&o.ImageMinimumGCAge, FlagImageMinimumGCAge, 2*time.Minute, "minimum age of an unused image before it may be collected")
	addDeprecatedAliases(fs)
	fs.DurationVar(&o.FileCheckFrequency, FlagFileCheckFrequency, 20*time.Second, "how often to re-read --pod-manifest-path besides reacting to changes")
	fs.DurationVar(&o.SyncFrequency, FlagSyncFrequency, time.Minute, "maximum period between pod syncs")
	fs.Int64Var(&o.PodMaxPids, FlagPodMaxPids, -1, "maximum processes per pod; -1 = no limit")
	fs.BoolVar(&o.SerializeImagePulls, FlagSerializeImagePulls, true, "pull one image at a time")
	fs.BoolVar(&o.SeccompDefault, FlagSeccompDefault, false, "give containers without a seccompProfile the runtime's default profile (RuntimeDefault) instead of Unconfined")
	fs.StringVar(&o.LogLevel, FlagLogLevel, "", "log level: debug, info, warn or error (default info)")
	fs.StringArrayVar(&o.PinnedImages, "pinned-image", nil, "image that image garbage collection never removes (repeatable)")
	fs.DurationVar(&o.ImageGCPeriod, "image-gc-period", 5*time.Minute, "how often image garbage collection runs")
	fs.StringSliceVar(&o.ClusterDNS, FlagClusterDNS, nil, "comma-separated DNS server IPs for pods with dnsPolicy ClusterFirst")
	fs.StringVar(&o.ClusterDomain, FlagClusterDomain, "", "the cluster's DNS domain (e.g. cluster.local): pods get its search domains")
	fs.StringVar(&o.ResolvConf, FlagResolvConf, "/etc/resolv.conf", "resolver configuration that pods with dnsPolicy Default copy; \"\" for none")
	fs.StringVar(&o.CNIConfDir, FlagCNIConfDir, DefaultCNIConfDir, "directory of CNI network configurations for pods off the host network (embedded runtime); the first one is used, and a default bridge network is written when there is none")
	fs.StringVar(&o.CNIBinDir, FlagCNIBinDir, DefaultCNIBinDir, "comma-separated directories searched for CNI plugins (scripts/cni-plugins.sh builds the reference ones)")
	fs.StringVar(&o.CNICacheDir, FlagCNICacheDir, "", "directory of CNI attachment records; default <root-dir>/cni/cache")
	fs.BoolVar(&o.EventSpamKeyPerReason, FlagEventSpamKeyPerReason, false, "give every event reason of an object its own spam-filter budget (minilet only); by default the filter is keyed as client-go's, by source, object and type")
	fs.IntVar(&o.Verbosity, FlagVerbosity, 0, "klog-style verbosity; 4 or more means --log-level=debug")
}

// NewOptions returns Options holding every flag's default, for callers that
// build a configuration without parsing a command line.
func NewOptions() *Options {
	o := &Options{}
	AddFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), o)
	return o
}

// deprecatedFlags maps names minilet used before it took the kubelet's to
// the kubelet's name. The old names still work, bound to the same value,
// and warn when used.
var deprecatedFlags = map[string]string{
	"image-minimum-gc-age": FlagImageMinimumGCAge,
}

// addDeprecatedAliases registers every old name beside its kubelet name.
func addDeprecatedAliases(fs *pflag.FlagSet) {
	for old, name := range deprecatedFlags {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		fs.AddFlag(&pflag.Flag{Name: old, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue})
		_ = fs.MarkDeprecated(old, "use --"+name+", the kubelet's name")
	}
}

// flagChanged reports whether the flag name, or an old alias of it, was
// set on the command line.
func flagChanged(fs *pflag.FlagSet, name string) bool {
	if fs.Changed(name) {
		return true
	}
	for old, n := range deprecatedFlags {
		if n == name && fs.Changed(old) {
			return true
		}
	}
	return false
}
