package config

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/minilet/minilet/internal/boundedread"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/eviction"
)

// The file's apiVersion and kind.
const (
	APIVersion = "kubelet.config.k8s.io/v1beta1"
	Kind       = "KubeletConfiguration"
)

// Load builds the Config: the --config file (if any), then every flag set
// explicitly on fs, then defaults for what is still unset, then
// validation. fs is the flag set AddFlags registered o on, after Parse. A
// nil fs means o was filled in by code (start from NewOptions): then every
// field of o counts as set and overrides the file. Errors wrap
// errdefs.ErrInvalidArgument (bad content) or the file's read error.
func Load(o *Options, fs *pflag.FlagSet) (*Config, error) {
	changed := func(name string) bool { return fs == nil || flagChanged(fs, name) }

	var kc kubeletv1beta1.KubeletConfiguration
	present := map[string]bool{}
	if o.ConfigFile != "" {
		var err error
		if present, err = readFile(o.ConfigFile, &kc); err != nil {
			return nil, err
		}
	}
	if err := applyFlags(&kc, o, changed); err != nil {
		return nil, err
	}
	SetDefaults(&kc, setFields{
		readOnlyPort: present["readOnlyPort"] || changed(FlagReadOnlyPort),
		port:         present["port"] || changed(FlagPort),
		cluster:      o.Kubeconfig != "" || o.BootstrapKubeconfig != "",
	})

	cfg, errs := build(&kc, o)
	if len(errs) > 0 {
		where := "flags"
		if o.ConfigFile != "" {
			where = "config file " + o.ConfigFile + " and flags"
		}
		return nil, fmt.Errorf("invalid configuration (%s): %w: %w", where, errs.ToAggregate(), errdefs.ErrInvalidArgument)
	}
	cfg.File = o.ConfigFile
	cfg.Ignored = ignoredFields(present)
	return cfg, nil
}

// MaxConfigFileSize bounds the --config file: 1 MiB, a hundred times a
// full KubeletConfiguration. A larger file, or one that is not a regular
// file (/dev/zero, a FIFO), is refused before it is read.
const MaxConfigFileSize = 1 << 20

// readFile strictly decodes a KubeletConfiguration file into kc and returns
// the top-level keys it sets.
func readFile(path string, kc *kubeletv1beta1.KubeletConfiguration) (map[string]bool, error) {
	data, err := boundedread.File(path, MaxConfigFileSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("config file %s: %w: %w", path, err, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	bad := func(err error) error {
		return fmt.Errorf("config file %s: %w: %w", path, err, errdefs.ErrInvalidArgument)
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, bad(err)
	}
	var top map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, &top); err != nil || top == nil {
		return nil, bad(errors.New("not a YAML or JSON object"))
	}
	var tm metav1.TypeMeta
	_ = sigsjson.UnmarshalCaseSensitivePreserveInts(j, &tm)
	if tm.Kind != Kind || tm.APIVersion != APIVersion {
		return nil, bad(fmt.Errorf("apiVersion %q kind %q: want apiVersion %s, kind %s", tm.APIVersion, tm.Kind, APIVersion, Kind))
	}
	strict, err := sigsjson.UnmarshalStrict(j, kc, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, bad(err)
	}
	if len(strict) > 0 {
		return nil, bad(errors.Join(strict...))
	}
	present := make(map[string]bool, len(top))
	for k := range top {
		present[k] = true
	}
	return present, nil
}

// applyFlags copies explicitly set flags into kc.
func applyFlags(kc *kubeletv1beta1.KubeletConfiguration, o *Options, changed func(string) bool) error {
	if changed(FlagPodManifestPath) {
		kc.StaticPodPath = o.PodManifestPath
	}
	if changed(FlagManifestURL) {
		kc.StaticPodURL = o.ManifestURL
	}
	if changed(FlagManifestURLHeader) {
		h, err := parseHeaders(o.ManifestURLHeader)
		if err != nil {
			return err
		}
		kc.StaticPodURLHeader = h
	}
	if changed(FlagContainerRuntimeEndpoint) {
		kc.ContainerRuntimeEndpoint = o.ContainerRuntimeEndpoint
	}
	if changed(FlagAddress) {
		kc.Address = o.Address
	}
	if changed(FlagReadOnlyPort) {
		kc.ReadOnlyPort = o.ReadOnlyPort
	}
	if changed(FlagPort) {
		kc.Port = o.Port
	}
	if changed(FlagRotateCertificates) {
		kc.RotateCertificates = o.RotateCertificates
	}
	if changed(FlagTLSCertFile) {
		kc.TLSCertFile = o.TLSCertFile
	}
	if changed(FlagTLSPrivateKeyFile) {
		kc.TLSPrivateKeyFile = o.TLSPrivateKeyFile
	}
	if changed(FlagClientCAFile) {
		kc.Authentication.X509.ClientCAFile = o.ClientCAFile
	}
	if changed(FlagAnonymousAuth) {
		kc.Authentication.Anonymous.Enabled = ptr(o.AnonymousAuth)
	}
	if changed(FlagAuthenticationWebhook) {
		kc.Authentication.Webhook.Enabled = ptr(o.AuthenticationWebhook)
	}
	if changed(FlagAuthorizationMode) {
		kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationMode(o.AuthorizationMode)
	}
	if changed(FlagCgroupRoot) {
		kc.CgroupRoot = o.CgroupRoot
	}
	if changed(FlagClusterDNS) {
		kc.ClusterDNS = o.ClusterDNS
	}
	if changed(FlagClusterDomain) {
		kc.ClusterDomain = o.ClusterDomain
	}
	if changed(FlagResolvConf) {
		kc.ResolverConfig = ptr(o.ResolvConf)
	}
	if changed(FlagCgroupsPerQOS) {
		kc.CgroupsPerQOS = ptr(o.CgroupsPerQOS)
	}
	if changed(FlagFailSwapOn) {
		kc.FailSwapOn = ptr(o.FailSwapOn)
	}
	if changed(FlagCgroupDriver) {
		kc.CgroupDriver = o.CgroupDriver
	}
	if changed(FlagKubeReserved) {
		kc.KubeReserved = o.KubeReserved
	}
	if changed(FlagSystemReserved) {
		kc.SystemReserved = o.SystemReserved
	}
	if changed(FlagEvictionHard) && strings.TrimSpace(o.EvictionHard) != "" {
		m, err := parseEvictionFlag(o.EvictionHard)
		if err != nil {
			return err
		}
		kc.EvictionHard = m
	}
	if changed(FlagMaxPods) {
		kc.MaxPods = o.MaxPods
	}
	if changed(FlagImageGCHighThreshold) {
		kc.ImageGCHighThresholdPercent = ptr(o.ImageGCHighThreshold)
	}
	if changed(FlagImageGCLowThreshold) {
		kc.ImageGCLowThresholdPercent = ptr(o.ImageGCLowThreshold)
	}
	if changed(FlagImageMinimumGCAge) {
		kc.ImageMinimumGCAge = metav1.Duration{Duration: o.ImageMinimumGCAge}
	}
	if changed(FlagFileCheckFrequency) {
		kc.FileCheckFrequency = metav1.Duration{Duration: o.FileCheckFrequency}
	}
	if changed(FlagSyncFrequency) {
		kc.SyncFrequency = metav1.Duration{Duration: o.SyncFrequency}
	}
	if changed(FlagPodMaxPids) {
		kc.PodPidsLimit = ptr(o.PodMaxPids)
	}
	if changed(FlagSerializeImagePulls) {
		kc.SerializeImagePulls = ptr(o.SerializeImagePulls)
	}
	if changed(FlagSeccompDefault) {
		kc.SeccompDefault = ptr(o.SeccompDefault)
	}
	return nil
}

// parseHeaders turns "Key:Value" items into a header map; repeated keys add values.
func parseHeaders(items []string) (map[string][]string, error) {
	h := map[string][]string{}
	for _, item := range items {
		k, v, ok := strings.Cut(item, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("--%s: %q is not Key:Value: %w", FlagManifestURLHeader, item, errdefs.ErrInvalidArgument)
		}
		k = strings.TrimSpace(k)
		h[k] = append(h[k], strings.TrimSpace(v))
	}
	return h, nil
}

// parseEvictionFlag parses "signal<value,signal<value".
func parseEvictionFlag(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		sig, val, ok := strings.Cut(item, "<")
		if !ok || sig == "" {
			return nil, fmt.Errorf("--%s: %q is not signal<value (e.g. memory.available<100Mi): %w",
				FlagEvictionHard, item, errdefs.ErrInvalidArgument)
		}
		m[strings.TrimSpace(sig)] = strings.TrimSpace(val)
	}
	return m, nil
}

// DefaultEvictionHard is the kubelet's default hard eviction set (Linux).
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		string(eviction.SignalMemoryAvailable):  "100Mi",
		string(eviction.SignalNodeFsAvailable):  "10%",
		string(eviction.SignalNodeFsInodesFree): "5%",
		string(eviction.SignalImageFsAvailable): "15%",
	}
}

// setFields says which fields whose zero value means something were set
// by the file or a flag, and whether the agent joins a cluster.
type setFields struct {
	readOnlyPort, port, cluster bool
}

// SetDefaults fills unset fields of kc with the kubelet's v1beta1 defaults
// for the fields minilet uses, and minilet's own where they differ. A
// standalone agent listens on loopback, serves the read-only port and,
// with no API server to ask, authorizes every authenticated caller; in
// cluster mode the kubelet's defaults hold (address 0.0.0.0, no read-only
// port, TokenReview and SubjectAccessReview).
func SetDefaults(kc *kubeletv1beta1.KubeletConfiguration, set setFields) {
	dur := func(d *metav1.Duration, def time.Duration) {
		if d.Duration == 0 {
			d.Duration = def
		}
	}
	dur(&kc.SyncFrequency, time.Minute)
	dur(&kc.FileCheckFrequency, 20*time.Second)
	dur(&kc.HTTPCheckFrequency, 20*time.Second)
	dur(&kc.NodeStatusUpdateFrequency, 10*time.Second)
	dur(&kc.NodeStatusReportFrequency, 5*time.Minute)
	dur(&kc.ImageMinimumGCAge, 2*time.Minute)
	dur(&kc.RuntimeRequestTimeout, 2*time.Minute)
	dur(&kc.EvictionPressureTransitionPeriod, 5*time.Minute)
	if kc.Address == "" {
		kc.Address = DefaultAddress
		if set.cluster {
			kc.Address = DefaultClusterAddress
		}
	}
	if kc.ReadOnlyPort == 0 && !set.readOnlyPort && !set.cluster {
		kc.ReadOnlyPort = DefaultReadOnlyPort
	}
	if kc.Port == 0 && !set.port {
		kc.Port = DefaultPort
	}
	if kc.Authentication.Anonymous.Enabled == nil {
		kc.Authentication.Anonymous.Enabled = ptr(false)
	}
	if kc.Authentication.Webhook.Enabled == nil {
		kc.Authentication.Webhook.Enabled = ptr(set.cluster)
	}
	dur(&kc.Authentication.Webhook.CacheTTL, 2*time.Minute)
	if kc.Authorization.Mode == "" {
		kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow
		if set.cluster {
			kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
		}
	}
	dur(&kc.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	dur(&kc.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	if kc.NodeStatusMaxImages == nil {
		kc.NodeStatusMaxImages = ptr(int32(50))
	}
	if kc.EnableProfilingHandler == nil {
		kc.EnableProfilingHandler = ptr(true)
	}
	if kc.EnableDebuggingHandlers == nil {
		kc.EnableDebuggingHandlers = ptr(true)
	}
	if kc.EnableSystemLogHandler == nil {
		kc.EnableSystemLogHandler = ptr(true)
	}
	if kc.CgroupRoot == "" {
		kc.CgroupRoot = DefaultCgroupRoot
	}
	if kc.CgroupsPerQOS == nil {
		kc.CgroupsPerQOS = ptr(true)
	}
	// The kubelet refuses to start with swap on; a standalone agent on an
	// edge box or a laptop, where swap is common and no scheduler counts
	// on the node's memory, runs with it (docs/swap.md).
	if kc.FailSwapOn == nil {
		kc.FailSwapOn = ptr(set.cluster)
	}
	if kc.CgroupDriver == "" {
		kc.CgroupDriver = "cgroupfs"
	}
	if kc.CPUCFSQuota == nil {
		kc.CPUCFSQuota = ptr(true)
	}
	if kc.CPUCFSQuotaPeriod == nil {
		kc.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	if kc.PodPidsLimit == nil {
		kc.PodPidsLimit = ptr[int64](-1)
	}
	if kc.MaxPods == 0 {
		kc.MaxPods = 110
	}
	if kc.ImageGCHighThresholdPercent == nil {
		kc.ImageGCHighThresholdPercent = ptr[int32](85)
	}
	if kc.ImageGCLowThresholdPercent == nil {
		kc.ImageGCLowThresholdPercent = ptr[int32](80)
	}
	if kc.SerializeImagePulls == nil {
		kc.SerializeImagePulls = ptr(true)
	}
	if kc.RegistryPullQPS == nil {
		kc.RegistryPullQPS = ptr[int32](5)
	}
	if kc.RegistryBurst == 0 {
		kc.RegistryBurst = 10
	}
	if kc.EventRecordQPS == nil {
		kc.EventRecordQPS = ptr[int32](50)
	}
	if kc.EventBurst == 0 {
		kc.EventBurst = 100
	}
	if kc.ContainerLogMaxSize == "" {
		kc.ContainerLogMaxSize = "10Mi"
	}
	if kc.ContainerLogMaxFiles == nil {
		kc.ContainerLogMaxFiles = ptr[int32](5)
	}
	if kc.ContainerLogMonitorInterval == nil {
		kc.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	switch {
	case kc.EvictionHard == nil:
		kc.EvictionHard = DefaultEvictionHard()
	case kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings:
		for k, v := range DefaultEvictionHard() {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// honoured are the KubeletConfiguration fields minilet acts on. Any other
// field a file sets is read, validated by the schema and ignored, and the
// agent says so at start.
var honoured = map[string]bool{
	"apiVersion": true, "kind": true,
	"address": true, "port": true, "readOnlyPort": true,
	"tlsCertFile": true, "tlsPrivateKeyFile": true, "tlsMinVersion": true,
	"rotateCertificates": true, "serverTLSBootstrap": true, "nodeStatusMaxImages": true,
	"authentication": true, "authorization": true,
	"enableDebuggingHandlers": true, "enableSystemLogHandler": true, "enableProfilingHandler": true,
	"staticPodPath": true, "staticPodURL": true, "staticPodURLHeader": true,
	"fileCheckFrequency": true, "httpCheckFrequency": true, "syncFrequency": true,
	"containerRuntimeEndpoint": true, "runtimeRequestTimeout": true,
	"nodeStatusUpdateFrequency": true, "nodeStatusReportFrequency": true, "maxPods": true,
	"cgroupRoot": true, "cgroupsPerQOS": true, "failSwapOn": true,
	"shutdownGracePeriod": true, "shutdownGracePeriodCriticalPods": true, "shutdownGracePeriodByPodPriority": true, "cgroupDriver": true, "podPidsLimit": true,
	"kubeReserved": true, "systemReserved": true, "enforceNodeAllocatable": true,
	"evictionHard": true, "evictionSoft": true, "evictionSoftGracePeriod": true,
	"evictionMinimumReclaim": true, "evictionPressureTransitionPeriod": true,
	"evictionMaxPodGracePeriod": true, "mergeDefaultEvictionSettings": true,
	"imageGCHighThresholdPercent": true, "imageGCLowThresholdPercent": true,
	"imageMinimumGCAge": true, "imageMaximumGCAge": true,
	"serializeImagePulls": true, "maxParallelImagePulls": true,
	"eventRecordQPS": true, "eventBurst": true,
	"containerLogMaxSize": true, "containerLogMaxFiles": true, "containerLogMonitorInterval": true,
}

// ignoredFields lists, sorted, the fields of present that minilet does not
// act on.
func ignoredFields(present map[string]bool) []string {
	var out []string
	for k := range present {
		if !honoured[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
