package config

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// hostname is swapped by tests.
var hostname = os.Hostname

// build validates the defaulted kc plus the flag-only options and converts
// them into a Config. Field paths use the KubeletConfiguration's JSON names,
// or the flag name for flag-only settings.
func build(kc *kubeletv1beta1.KubeletConfiguration, o *Options) (*Config, field.ErrorList) {
	var errs field.ErrorList
	c := &Config{
		Raw:                             *kc,
		RootDir:                         o.RootDir,
		PinnedImages:                    o.PinnedImages,
		ImageGCPeriod:                   o.ImageGCPeriod,
		DevicePluginDir:                 o.DevicePluginDir,
		ClusterDNS:                      kc.ClusterDNS,
		ClusterDomain:                   kc.ClusterDomain,
		CNIConfDir:                      o.CNIConfDir,
		CNIBinDirs:                      splitList(o.CNIBinDir),
		CNICacheDir:                     o.CNICacheDir,
		EventSpamKeyPerReason:           o.EventSpamKeyPerReason,
		Kubeconfig:                      o.Kubeconfig,
		ObjectManifestPath:              o.ObjectManifestPath,
		BootstrapKubeconfig:             o.BootstrapKubeconfig,
		CertDir:                         o.CertDir,
		RotateCertificates:              kc.RotateCertificates,
		ServerTLSBootstrap:              kc.ServerTLSBootstrap,
		StaticPodPath:                   kc.StaticPodPath,
		StaticPodURL:                    kc.StaticPodURL,
		StaticPodURLHeader:              http.Header{},
		ContainerRuntimeEndpoint:        kc.ContainerRuntimeEndpoint,
		ImageServiceEndpoint:            kc.ImageServiceEndpoint,
		ReadOnlyPort:                    int(kc.ReadOnlyPort),
		MaxPods:                         int(kc.MaxPods),
		CgroupRoot:                      kc.CgroupRoot,
		CgroupsPerQOS:                   *kc.CgroupsPerQOS,
		FailSwapOn:                      *kc.FailSwapOn,
		ShutdownGracePeriod:             kc.ShutdownGracePeriod.Duration,
		ShutdownGracePeriodCriticalPods: kc.ShutdownGracePeriodCriticalPods.Duration,
		CgroupDriver:                    kc.CgroupDriver,
		CPUCFSQuota:                     *kc.CPUCFSQuota,
		CPUCFSQuotaPeriod:               kc.CPUCFSQuotaPeriod.Duration,
		PodPidsLimit:                    *kc.PodPidsLimit,
		SeccompDefault:                  kc.SeccompDefault != nil && *kc.SeccompDefault,
		EnforceNodeAllocatable:          kc.EnforceNodeAllocatable,
		EvictionMaxPodGracePeriod:       time.Duration(kc.EvictionMaxPodGracePeriod) * time.Second,
		ImageGCHighThresholdPercent:     int(*kc.ImageGCHighThresholdPercent),
		ImageGCLowThresholdPercent:      int(*kc.ImageGCLowThresholdPercent),
		SerializeImagePulls:             *kc.SerializeImagePulls,
		RegistryPullQPS:                 int(*kc.RegistryPullQPS),
		RegistryBurst:                   int(kc.RegistryBurst),
		ContainerLogMaxFiles:            int(*kc.ContainerLogMaxFiles),
		ContainerLogMonitorInterval:     kc.ContainerLogMonitorInterval.Duration,
		EventRecordQPS:                  int(*kc.EventRecordQPS),
		EventBurst:                      int(kc.EventBurst),
	}
	if kc.MaxParallelImagePulls != nil {
		c.MaxParallelImagePulls = int(*kc.MaxParallelImagePulls)
	}
	for k, vs := range kc.StaticPodURLHeader {
		for _, v := range vs {
			c.StaticPodURLHeader.Add(k, v)
		}
	}

	// Durations: negative is always wrong; zero was defaulted where a default exists.
	durations := []struct {
		name string
		dst  *time.Duration
		src  time.Duration
	}{
		{"syncFrequency", &c.SyncFrequency, kc.SyncFrequency.Duration},
		{"fileCheckFrequency", &c.FileCheckFrequency, kc.FileCheckFrequency.Duration},
		{"httpCheckFrequency", &c.HTTPCheckFrequency, kc.HTTPCheckFrequency.Duration},
		{"nodeStatusUpdateFrequency", &c.NodeStatusUpdateFrequency, kc.NodeStatusUpdateFrequency.Duration},
		{"nodeStatusReportFrequency", &c.NodeStatusReportFrequency, kc.NodeStatusReportFrequency.Duration},
		{"imageMinimumGCAge", &c.ImageMinimumGCAge, kc.ImageMinimumGCAge.Duration},
		{"imageMaximumGCAge", &c.ImageMaximumGCAge, kc.ImageMaximumGCAge.Duration},
		{"runtimeRequestTimeout", &c.RuntimeRequestTimeout, kc.RuntimeRequestTimeout.Duration},
		{"evictionPressureTransitionPeriod", &c.EvictionPressureTransitionPeriod, kc.EvictionPressureTransitionPeriod.Duration},
	}
	for _, d := range durations {
		*d.dst = d.src
		if d.src < 0 {
			errs = append(errs, field.Invalid(field.NewPath(d.name), d.src.String(), "must be greater than or equal to 0"))
		}
	}
	if c.ImageMaximumGCAge > 0 && c.ImageMaximumGCAge <= c.ImageMinimumGCAge {
		errs = append(errs, field.Invalid(field.NewPath("imageMaximumGCAge"), c.ImageMaximumGCAge.String(),
			fmt.Sprintf("must be greater than imageMinimumGCAge (%s)", c.ImageMinimumGCAge)))
	}
	if c.CPUCFSQuotaPeriod < time.Millisecond || c.CPUCFSQuotaPeriod > time.Second {
		errs = append(errs, field.Invalid(field.NewPath("cpuCFSQuotaPeriod"), c.CPUCFSQuotaPeriod.String(), "must be between 1ms and 1s, inclusive"))
	}

	errs = append(errs, validateRanges(kc)...)
	errs = append(errs, buildIdentity(c, kc, o)...)
	errs = append(errs, buildServer(c, kc)...)
	errs = append(errs, buildShutdown(c, kc)...)

	var rerrs field.ErrorList
	c.KubeReserved, rerrs = parseReserved(kc.KubeReserved, field.NewPath("kubeReserved"))
	errs = append(errs, rerrs...)
	c.SystemReserved, rerrs = parseReserved(kc.SystemReserved, field.NewPath("systemReserved"))
	errs = append(errs, rerrs...)

	var eerrs field.ErrorList
	c.EvictionHard, c.EvictionSoft, eerrs = parseEviction(kc)
	errs = append(errs, eerrs...)

	if q, err := resource.ParseQuantity(kc.ContainerLogMaxSize); err != nil || q.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxSize"), kc.ContainerLogMaxSize, "must be a positive quantity, e.g. 10Mi"))
	} else {
		c.ContainerLogMaxSize = q.Value()
	}

	level, err := parseLogLevel(o.LogLevel, o.Verbosity)
	if err != nil {
		errs = append(errs, field.NotSupported(field.NewPath("--"+FlagLogLevel), o.LogLevel, []string{"debug", "info", "warn", "error"}))
	}
	c.LogLevel = level
	return c, errs
}

// validateRanges checks numeric ranges and enumerations.
func validateRanges(kc *kubeletv1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	percent := func(name string, v int32) {
		if v < 0 || v > 100 {
			errs = append(errs, field.Invalid(field.NewPath(name), v, "must be between 0 and 100"))
		}
	}
	high, low := *kc.ImageGCHighThresholdPercent, *kc.ImageGCLowThresholdPercent
	percent("imageGCHighThresholdPercent", high)
	percent("imageGCLowThresholdPercent", low)
	if low >= high {
		errs = append(errs, field.Invalid(field.NewPath("imageGCLowThresholdPercent"), low,
			fmt.Sprintf("must be less than imageGCHighThresholdPercent (%d)", high)))
	}
	nonNeg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, field.Invalid(field.NewPath(name), v, "must be greater than or equal to 0"))
		}
	}
	nonNeg("maxPods", int64(kc.MaxPods))
	nonNeg("registryPullQPS", int64(*kc.RegistryPullQPS))
	nonNeg("registryBurst", int64(kc.RegistryBurst))
	nonNeg("eventRecordQPS", int64(*kc.EventRecordQPS))
	nonNeg("eventBurst", int64(kc.EventBurst))
	nonNeg("evictionMaxPodGracePeriod", int64(kc.EvictionMaxPodGracePeriod))
	if kc.MaxParallelImagePulls != nil {
		if *kc.MaxParallelImagePulls < 1 {
			errs = append(errs, field.Invalid(field.NewPath("maxParallelImagePulls"), *kc.MaxParallelImagePulls, "must be greater than 0"))
		} else if *kc.SerializeImagePulls && *kc.MaxParallelImagePulls > 1 {
			errs = append(errs, field.Invalid(field.NewPath("maxParallelImagePulls"), *kc.MaxParallelImagePulls,
				"must be 1 (or unset) when serializeImagePulls is true"))
		}
	}
	if p := *kc.PodPidsLimit; p < -1 {
		errs = append(errs, field.Invalid(field.NewPath("podPidsLimit"), p, "must be -1 (no limit) or greater"))
	}
	if p := kc.ReadOnlyPort; p < 0 || p > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("readOnlyPort"), p, "must be between 0 and 65535"))
	}
	if p := kc.Port; p < 0 || p > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("port"), p, "must be between 0 (pick a free port) and 65535"))
	}
	if n := *kc.ContainerLogMaxFiles; n < 2 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxFiles"), n, "must be greater than 1"))
	}
	if d := kc.ContainerLogMonitorInterval.Duration; d < 3*time.Second {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMonitorInterval"), d.String(), "must be at least 3s"))
	}
	if kc.CgroupDriver != "cgroupfs" && kc.CgroupDriver != "systemd" {
		errs = append(errs, field.NotSupported(field.NewPath("cgroupDriver"), kc.CgroupDriver, []string{"cgroupfs", "systemd"}))
	}
	if !strings.HasPrefix(kc.CgroupRoot, "/") {
		errs = append(errs, field.Invalid(field.NewPath("cgroupRoot"), kc.CgroupRoot, "must be an absolute cgroup path, e.g. /minilet"))
	}
	for i, v := range kc.EnforceNodeAllocatable {
		switch v {
		case "pods", "system-reserved", "kube-reserved", "none":
		default:
			errs = append(errs, field.NotSupported(field.NewPath("enforceNodeAllocatable").Index(i), v,
				[]string{"pods", "system-reserved", "kube-reserved", "none"}))
		}
	}
	return errs
}

// buildIdentity resolves the node name, node IP, address and paths.
func buildIdentity(c *Config, kc *kubeletv1beta1.KubeletConfiguration, o *Options) field.ErrorList {
	var errs field.ErrorList
	name := o.HostnameOverride
	namePath := field.NewPath("--" + FlagHostnameOverride)
	if name == "" {
		h, err := hostname()
		if err != nil {
			errs = append(errs, field.InternalError(namePath, fmt.Errorf("no --hostname-override and no host name: %w", err)))
		}
		name = h
	}
	c.NodeName = strings.ToLower(strings.TrimSpace(name))
	for _, msg := range validation.IsDNS1123Subdomain(c.NodeName) {
		errs = append(errs, field.Invalid(namePath, c.NodeName, "node name "+msg))
	}
	if c.Address = net.ParseIP(kc.Address); c.Address == nil {
		errs = append(errs, field.Invalid(field.NewPath("address"), kc.Address, "must be an IP address"))
	}
	if o.NodeIP != "" {
		if c.NodeIP = net.ParseIP(o.NodeIP); c.NodeIP == nil {
			errs = append(errs, field.Invalid(field.NewPath("--"+FlagNodeIP), o.NodeIP, "must be an IP address"))
		}
	}
	if c.RootDir == "" || !strings.HasPrefix(c.RootDir, "/") {
		errs = append(errs, field.Invalid(field.NewPath("--"+FlagRootDir), c.RootDir, "must be an absolute path"))
	}
	if c.DevicePluginDir == "" || !strings.HasPrefix(c.DevicePluginDir, "/") {
		errs = append(errs, field.Invalid(field.NewPath("--"+FlagDevicePluginDir), c.DevicePluginDir, "must be an absolute path"))
	}
	if u := kc.StaticPodURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		errs = append(errs, field.Invalid(field.NewPath("staticPodURL"), u, "must be an http or https URL"))
	}
	if c.ObjectManifestPath != "" && c.Kubeconfig != "" {
		errs = append(errs, field.Invalid(field.NewPath("--"+FlagObjectManifestPath), c.ObjectManifestPath, "ConfigMaps and Secrets come from the API server with --kubeconfig; the folder is for a standalone agent"))
	}
	if c.BootstrapKubeconfig != "" && c.Kubeconfig == "" {
		errs = append(errs, field.Required(field.NewPath("--"+FlagKubeconfig), "--"+FlagBootstrapKubeconfig+" needs --kubeconfig: the path the bootstrapped credentials are written to"))
	}
	if c.CertDir == "" {
		c.CertDir = filepath.Join(c.RootDir, "pki")
	} else if !strings.HasPrefix(c.CertDir, "/") {
		errs = append(errs, field.Invalid(field.NewPath("--"+FlagCertDir), c.CertDir, "must be an absolute path"))
	}
	errs = append(errs, validateCNI(c)...)
	c.ResolvConf = "/etc/resolv.conf" // the kubelet's default
	if kc.ResolverConfig != nil {
		c.ResolvConf = *kc.ResolverConfig
	}
	for i, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			errs = append(errs, field.Invalid(field.NewPath("clusterDNS").Index(i), ip, "must be an IP address"))
		}
	}
	c.NodeStatusMaxImages = int(*kc.NodeStatusMaxImages)
	if c.NodeStatusMaxImages < -1 {
		errs = append(errs, field.Invalid(field.NewPath("nodeStatusMaxImages"), c.NodeStatusMaxImages, "must be -1 (no limit) or greater"))
	}
	return errs
}

// buildServer takes the HTTPS API's settings: TLS files, authentication
// and authorization.
func buildServer(c *Config, kc *kubeletv1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	c.Port = int(kc.Port)
	c.TLSCertFile, c.TLSPrivateKeyFile = kc.TLSCertFile, kc.TLSPrivateKeyFile
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		errs = append(errs, field.Required(field.NewPath("tlsPrivateKeyFile"), "tlsCertFile and tlsPrivateKeyFile (--tls-cert-file, --tls-private-key-file) go together"))
	}
	c.TLSMinVersion = tls.VersionTLS12
	switch kc.TLSMinVersion {
	case "", "VersionTLS12":
	case "VersionTLS13":
		c.TLSMinVersion = tls.VersionTLS13
	default:
		errs = append(errs, field.NotSupported(field.NewPath("tlsMinVersion"), kc.TLSMinVersion, []string{"VersionTLS12", "VersionTLS13"}))
	}
	authn, authz := kc.Authentication, kc.Authorization
	c.ClientCAFile = authn.X509.ClientCAFile
	c.AnonymousAuth = *authn.Anonymous.Enabled
	c.WebhookAuthn = *authn.Webhook.Enabled
	c.WebhookAuthnCacheTTL = authn.Webhook.CacheTTL.Duration
	c.AuthorizationMode = string(authz.Mode)
	c.AuthorizedTTL = authz.Webhook.CacheAuthorizedTTL.Duration
	c.UnauthorizedTTL = authz.Webhook.CacheUnauthorizedTTL.Duration
	c.SystemLogHandler = *kc.EnableDebuggingHandlers && *kc.EnableSystemLogHandler
	if m := authz.Mode; m != kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow && m != kubeletv1beta1.KubeletAuthorizationModeWebhook {
		errs = append(errs, field.NotSupported(field.NewPath("authorization", "mode"), m, []string{"AlwaysAllow", "Webhook"}))
	}
	return errs
}

// reservable are the resources kubeReserved and systemReserved may name.
var reservable = []string{"cpu", "memory", "ephemeral-storage", "pid"}

func parseReserved(m map[string]string, p *field.Path) (v1.ResourceList, field.ErrorList) {
	if len(m) == 0 {
		return nil, nil
	}
	var errs field.ErrorList
	list := v1.ResourceList{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kp := p.Key(k)
		if !slices.Contains(reservable, k) {
			errs = append(errs, field.NotSupported(kp, k, reservable))
			continue
		}
		q, err := resource.ParseQuantity(m[k])
		if err != nil {
			errs = append(errs, field.Invalid(kp, m[k], "must be a quantity, e.g. 100m or 256Mi"))
			continue
		}
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(kp, m[k], "must be greater than or equal to 0"))
			continue
		}
		list[v1.ResourceName(k)] = q
	}
	return list, errs
}

func parseLogLevel(s string, verbosity int) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "":
		if verbosity >= 4 {
			return slog.LevelDebug, nil
		}
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("unknown log level %q", s)
}

// validateCNI checks the pod network paths and defaults the cache dir.
func validateCNI(c *Config) field.ErrorList {
	var errs field.ErrorList
	if !strings.HasPrefix(c.CNIConfDir, "/") {
		errs = append(errs, field.Invalid(field.NewPath("--"+FlagCNIConfDir), c.CNIConfDir, "must be an absolute path"))
	}
	if len(c.CNIBinDirs) == 0 {
		errs = append(errs, field.Required(field.NewPath("--"+FlagCNIBinDir), "at least one directory of CNI plugins"))
	}
	for _, d := range c.CNIBinDirs {
		if !strings.HasPrefix(d, "/") {
			errs = append(errs, field.Invalid(field.NewPath("--"+FlagCNIBinDir), d, "must be absolute paths"))
		}
	}
	if c.CNICacheDir == "" {
		c.CNICacheDir = filepath.Join(c.RootDir, "cni", "cache")
	} else if !strings.HasPrefix(c.CNICacheDir, "/") {
		errs = append(errs, field.Invalid(field.NewPath("--"+FlagCNICacheDir), c.CNICacheDir, "must be an absolute path"))
	}
	return errs
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// buildShutdown takes the graceful node shutdown fields, validated as the
// kubelet validates them.
func buildShutdown(c *Config, kc *kubeletv1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	total, critical := kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration
	if total < 0 {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriod"), total.String(), "must not be negative"))
	}
	if critical < 0 || critical > total {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriodCriticalPods"), critical.String(), "must be between 0 and shutdownGracePeriod"))
	}
	if len(kc.ShutdownGracePeriodByPodPriority) > 0 && (total != 0 || critical != 0) {
		errs = append(errs, field.Forbidden(field.NewPath("shutdownGracePeriodByPodPriority"), "cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods"))
	}
	for i, p := range kc.ShutdownGracePeriodByPodPriority {
		if p.ShutdownGracePeriodSeconds < 0 {
			errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriodByPodPriority").Index(i).Child("shutdownGracePeriodSeconds"), p.ShutdownGracePeriodSeconds, "must not be negative"))
		}
		c.ShutdownGracePeriodByPodPriority = append(c.ShutdownGracePeriodByPodPriority,
			ShutdownPriorityPeriod{Priority: p.Priority, Period: time.Duration(p.ShutdownGracePeriodSeconds) * time.Second})
	}
	return errs
}
