package podspec

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults the API server (core/v1 defaulting) applies and minilet relies on.
const (
	DefaultTerminationGracePeriodSeconds int64 = 30
	DefaultTerminationMessagePath              = "/dev/termination-log"
	DefaultSchedulerName                       = "default-scheduler"
	DefaultProbeTimeoutSeconds           int32 = 1
	DefaultProbePeriodSeconds            int32 = 10
	DefaultProbeSuccessThreshold         int32 = 1
	DefaultProbeFailureThreshold         int32 = 3
)

// HostImage is the image reference meaning "the host's root filesystem".
const HostImage = "host"

// SetDefaults fills the fields a user may leave out, as the API server's
// v1 defaulting would: restartPolicy Always, dnsPolicy ClusterFirst,
// terminationGracePeriodSeconds 30, schedulerName, enableServiceLinks,
// container imagePullPolicy (by tag), termination message path/policy,
// port protocol TCP, probe timings (1s/10s/1/3) and HTTP defaults
// (path "/", scheme HTTP), and requests copied from limits when only limits
// are set. It never overwrites a value the manifest sets.
func SetDefaults(pod *v1.Pod) {
	spec := &pod.Spec
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = v1.RestartPolicyAlways
	}
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = v1.DNSClusterFirst
	}
	if spec.TerminationGracePeriodSeconds == nil {
		g := DefaultTerminationGracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &g
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = DefaultSchedulerName
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &v1.PodSecurityContext{}
	}
	if spec.EnableServiceLinks == nil {
		t := true
		spec.EnableServiceLinks = &t
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
}

func defaultContainer(c *v1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = DefaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = DefaultTerminationMessagePath
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = v1.ProtocolTCP
		}
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		for _, h := range []*v1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
	// Requests default to limits for every resource that has only a limit.
	for name, limit := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; ok {
			continue
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = v1.ResourceList{}
		}
		c.Resources.Requests[name] = limit.DeepCopy()
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
}

func defaultProbe(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = DefaultProbeTimeoutSeconds
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = DefaultProbePeriodSeconds
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = DefaultProbeSuccessThreshold
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = DefaultProbeFailureThreshold
	}
	defaultHTTPGet(p.HTTPGet)
}

func defaultHTTPGet(h *v1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = v1.URISchemeHTTP
	}
}

// DefaultPullPolicy is the pull policy for an image that names none:
// Never for the host image ("host" or ""), Always for ":latest" or no tag
// (and no digest), IfNotPresent otherwise.
func DefaultPullPolicy(image string) v1.PullPolicy {
	if image == "" || image == HostImage {
		return v1.PullNever
	}
	if strings.Contains(image, "@") {
		return v1.PullIfNotPresent
	}
	last := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 || last[i+1:] == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// ProbePort resolves a probe's port (number or container port name) against
// the container's ports. ok is false when a name matches no port.
func ProbePort(port intstr.IntOrString, c *v1.Container) (int, bool) {
	if port.Type == intstr.Int {
		return port.IntValue(), true
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), true
		}
	}
	return 0, false
}
