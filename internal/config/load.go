package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

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
	changed := func(name string) bool { return fs == nil || fs.Changed(name) }

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
	readOnlyPortSet := present["readOnlyPort"] || changed(FlagReadOnlyPort)
	SetDefaults(&kc, readOnlyPortSet)

	cfg, errs := build(&kc, o)
	if len(errs) > 0 {
		where := "flags"
		if o.ConfigFile != "" {
			where = "config file " + o.ConfigFile + " and flags"
		}
		return nil, fmt.Errorf("invalid configuration (%s): %w: %w", where, errs.ToAggregate(), errdefs.ErrInvalidArgument)
	}
	cfg.File = o.ConfigFile
	return cfg, nil
}

// readFile strictly decodes a KubeletConfiguration file into kc and returns
// the top-level keys it sets.
func readFile(path string, kc *kubeletv1beta1.KubeletConfiguration) (map[string]bool, error) {
	data, err := os.ReadFile(path)
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
	if changed(FlagCgroupRoot) {
		kc.CgroupRoot = o.CgroupRoot
	}
	if changed(FlagCgroupsPerQOS) {
		kc.CgroupsPerQOS = ptr(o.CgroupsPerQOS)
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

// SetDefaults fills unset fields of kc with the kubelet's v1beta1 defaults
// for the fields minilet uses, and minilet's own where they differ
// (address, readOnlyPort, cgroupRoot). readOnlyPortSet says whether a 0
// readOnlyPort was asked for (0 = pick a free port) rather than left unset.
func SetDefaults(kc *kubeletv1beta1.KubeletConfiguration, readOnlyPortSet bool) {
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
	}
	if kc.ReadOnlyPort == 0 && !readOnlyPortSet {
		kc.ReadOnlyPort = DefaultReadOnlyPort
	}
	if kc.CgroupRoot == "" {
		kc.CgroupRoot = DefaultCgroupRoot
	}
	if kc.CgroupsPerQOS == nil {
		kc.CgroupsPerQOS = ptr(true)
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
