package podspec

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validate checks what the API server would reject in the fields minilet
// uses. Call it after SetDefaults (and ApplyStatic for static pods). Each
// error carries its field path, e.g.
// "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".
func Validate(pod *v1.Pod) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if pod.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "name is required"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(pod.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), pod.Name, msg))
		}
	}
	if pod.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, msg))
		}
	}
	return append(errs, validateSpec(&pod.Spec, field.NewPath("spec"))...)
}

func validateSpec(spec *v1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch spec.RestartPolicy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	case "":
		errs = append(errs, field.Required(p.Child("restartPolicy"), ""))
	default:
		errs = append(errs, field.NotSupported(p.Child("restartPolicy"), spec.RestartPolicy,
			[]string{string(v1.RestartPolicyAlways), string(v1.RestartPolicyOnFailure), string(v1.RestartPolicyNever)}))
	}
	switch spec.DNSPolicy {
	case "", v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet, v1.DNSDefault, v1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(p.Child("dnsPolicy"), spec.DNSPolicy,
			[]string{string(v1.DNSClusterFirst), string(v1.DNSClusterFirstWithHostNet), string(v1.DNSDefault), string(v1.DNSNone)}))
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if d := spec.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *d, "must be greater than 0"))
	}
	volumes, verrs := validateVolumes(spec.Volumes, p.Child("volumes"))
	errs = append(errs, verrs...)

	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), "must have at least one container"))
	}
	names := sets.New[string]()
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		cp := p.Child("initContainers").Index(i)
		errs = append(errs, validateContainer(c, cp, names, volumes)...)
		errs = append(errs, validateInitOnly(c, cp)...)
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		cp := p.Child("containers").Index(i)
		errs = append(errs, validateContainer(c, cp, names, volumes)...)
		errs = append(errs, validateRestartRules(c, cp)...)
	}
	return errs
}

func validateVolumes(vols []v1.Volume, p *field.Path) (sets.Set[string], field.ErrorList) {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, v := range vols {
		np := p.Index(i).Child("name")
		if v.Name == "" {
			errs = append(errs, field.Required(np, ""))
			continue
		}
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(np, v.Name, msg))
		}
		if names.Has(v.Name) {
			errs = append(errs, field.Duplicate(np, v.Name))
		}
		names.Insert(v.Name)
		if v.HostPath != nil && !strings.HasPrefix(v.HostPath.Path, "/") {
			errs = append(errs, field.Invalid(p.Index(i).Child("hostPath", "path"), v.HostPath.Path, "must be an absolute path"))
		}
	}
	return names, errs
}

// validateRestartRules checks an app container's restartPolicy and
// restartPolicyRules (ContainerRestartRules, beta and on in 1.37): rules
// need an explicit restartPolicy, restart the container or all the pod's
// containers (RestartAllContainersOnContainerExits) on exit codes only, at
// most 20.
func validateRestartRules(c *v1.Container, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.RestartPolicy != nil {
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyNever:
		default:
			errs = append(errs, field.NotSupported(p.Child("restartPolicy"), *c.RestartPolicy, []string{
				string(v1.ContainerRestartPolicyAlways), string(v1.ContainerRestartPolicyOnFailure), string(v1.ContainerRestartPolicyNever)}))
		}
	}
	if len(c.RestartPolicyRules) == 0 {
		return errs
	}
	rp := p.Child("restartPolicyRules")
	if c.RestartPolicy == nil {
		errs = append(errs, field.Required(p.Child("restartPolicy"), "must be set when restartPolicyRules are given"))
	}
	if len(c.RestartPolicyRules) > 20 {
		errs = append(errs, field.TooMany(rp, len(c.RestartPolicyRules), 20))
	}
	for i, r := range c.RestartPolicyRules {
		if r.Action != v1.ContainerRestartRuleActionRestart && r.Action != v1.ContainerRestartRuleActionRestartAllContainers {
			errs = append(errs, field.NotSupported(rp.Index(i).Child("action"), r.Action, []string{
				string(v1.ContainerRestartRuleActionRestart), string(v1.ContainerRestartRuleActionRestartAllContainers)}))
		}
		switch {
		case r.ExitCodes == nil:
			errs = append(errs, field.Required(rp.Index(i).Child("exitCodes"), "must be set"))
		case r.ExitCodes.Operator != v1.ContainerRestartRuleOnExitCodesOpIn && r.ExitCodes.Operator != v1.ContainerRestartRuleOnExitCodesOpNotIn:
			errs = append(errs, field.NotSupported(rp.Index(i).Child("exitCodes", "operator"), r.ExitCodes.Operator, []string{
				string(v1.ContainerRestartRuleOnExitCodesOpIn), string(v1.ContainerRestartRuleOnExitCodesOpNotIn)}))
		case len(r.ExitCodes.Values) > 255:
			errs = append(errs, field.TooMany(rp.Index(i).Child("exitCodes", "values"), len(r.ExitCodes.Values), 255))
		}
	}
	return errs
}

// validateInitOnly checks the rules that differ for init containers: the only
// allowed restartPolicy is Always (a sidecar), and only sidecars may probe.
func validateInitOnly(c *v1.Container, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	sidecar := false
	if c.RestartPolicy != nil {
		if *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecar = true
		} else {
			errs = append(errs, field.NotSupported(p.Child("restartPolicy"), *c.RestartPolicy,
				[]string{string(v1.ContainerRestartPolicyAlways)}))
		}
	}
	if sidecar {
		return errs
	}
	if c.LivenessProbe != nil {
		errs = append(errs, field.Forbidden(p.Child("livenessProbe"), "may not be set for init containers without restartPolicy=Always"))
	}
	if c.ReadinessProbe != nil {
		errs = append(errs, field.Forbidden(p.Child("readinessProbe"), "may not be set for init containers without restartPolicy=Always"))
	}
	if c.StartupProbe != nil {
		errs = append(errs, field.Forbidden(p.Child("startupProbe"), "may not be set for init containers without restartPolicy=Always"))
	}
	return errs
}

func validateContainer(c *v1.Container, p *field.Path, names, volumes sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if c.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
		}
		if names.Has(c.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		names.Insert(c.Name)
	}
	if strings.TrimSpace(c.Image) == "" {
		errs = append(errs, field.Required(p.Child("image"), `use "host" for the host's root filesystem`))
	} else if c.Image != strings.TrimSpace(c.Image) {
		errs = append(errs, field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	switch c.ImagePullPolicy {
	case "", v1.PullAlways, v1.PullIfNotPresent, v1.PullNever:
	default:
		errs = append(errs, field.NotSupported(p.Child("imagePullPolicy"), c.ImagePullPolicy,
			[]string{string(v1.PullAlways), string(v1.PullIfNotPresent), string(v1.PullNever)}))
	}
	errs = append(errs, validatePorts(c.Ports, p.Child("ports"))...)
	errs = append(errs, validateResources(&c.Resources, p.Child("resources"))...)
	for i, e := range c.Env {
		if e.Name == "" {
			errs = append(errs, field.Required(p.Child("env").Index(i).Child("name"), ""))
		}
	}
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if !strings.HasPrefix(m.MountPath, "/") {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be an absolute path"))
		}
	}
	errs = append(errs, validateProbe(c.LivenessProbe, c, p.Child("livenessProbe"), true)...)
	errs = append(errs, validateProbe(c.ReadinessProbe, c, p.Child("readinessProbe"), false)...)
	errs = append(errs, validateProbe(c.StartupProbe, c, p.Child("startupProbe"), true)...)
	return errs
}

func validatePorts(ports []v1.ContainerPort, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, port := range ports {
		pp := p.Index(i)
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names.Has(port.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names.Insert(port.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
			}
		}
		switch port.Protocol {
		case "", v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol,
				[]string{string(v1.ProtocolTCP), string(v1.ProtocolUDP), string(v1.ProtocolSCTP)}))
		}
	}
	return errs
}

func validateResources(r *v1.ResourceRequirements, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(list v1.ResourceList, lp *field.Path) {
		for name, q := range list {
			np := lp.Key(string(name))
			if !isStandardOrExtended(name) {
				errs = append(errs, field.Invalid(np, string(name),
					"must be a standard resource (cpu, memory, ephemeral-storage, hugepages-<size>) or a domain-prefixed extended resource"))
			}
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(np, q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	check(r.Limits, p.Child("limits"))
	check(r.Requests, p.Child("requests"))
	for name, req := range r.Requests {
		limit, ok := r.Limits[name]
		if ok && req.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
		if !ok && isExtended(name) {
			errs = append(errs, field.Required(p.Child("limits").Key(string(name)), "extended resources must set a limit equal to the request"))
		}
		if ok && isExtended(name) && req.Cmp(limit) != 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(), "must be equal to "+string(name)+" limit"))
		}
		if isExtended(name) && !isInteger(req) {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(), "must be an integer"))
		}
	}
	return errs
}

func isInteger(q resource.Quantity) bool {
	return q.MilliValue()%1000 == 0
}

func isStandardOrExtended(name v1.ResourceName) bool {
	switch name {
	case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return true
	}
	if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
		return true
	}
	return isExtended(name)
}

// isExtended reports a domain-prefixed resource outside kubernetes.io, like
// "example.com/gpu": the kind a device plugin advertises.
func isExtended(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.HasPrefix(s, "requests.") {
		return false
	}
	if len(validation.IsQualifiedName(s)) != 0 {
		return false
	}
	domain := s[:strings.Index(s, "/")]
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

func validateProbe(pr *v1.Probe, c *v1.Container, p *field.Path, successMustBeOne bool) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	handlers := 0
	if pr.Exec != nil {
		handlers++
		if len(pr.Exec.Command) == 0 {
			errs = append(errs, field.Required(p.Child("exec", "command"), ""))
		}
	}
	if pr.HTTPGet != nil {
		handlers++
		errs = append(errs, validateProbePort(pr.HTTPGet.Port, c, p.Child("httpGet", "port"))...)
		switch pr.HTTPGet.Scheme {
		case "", v1.URISchemeHTTP, v1.URISchemeHTTPS:
		default:
			errs = append(errs, field.NotSupported(p.Child("httpGet", "scheme"), pr.HTTPGet.Scheme,
				[]string{string(v1.URISchemeHTTP), string(v1.URISchemeHTTPS)}))
		}
	}
	if pr.TCPSocket != nil {
		handlers++
		errs = append(errs, validateProbePort(pr.TCPSocket.Port, c, p.Child("tcpSocket", "port"))...)
	}
	if pr.GRPC != nil {
		handlers++
		for _, msg := range validation.IsValidPortNum(int(pr.GRPC.Port)) {
			errs = append(errs, field.Invalid(p.Child("grpc", "port"), pr.GRPC.Port, msg))
		}
	}
	switch {
	case handlers == 0:
		errs = append(errs, field.Required(p, "must specify a handler type (exec, httpGet, tcpSocket or grpc)"))
	case handlers > 1:
		errs = append(errs, field.Forbidden(p, "may not specify more than 1 handler type"))
	}
	nonNeg := func(name string, v int32) {
		if v < 0 {
			errs = append(errs, field.Invalid(p.Child(name), v, "must be greater than or equal to 0"))
		}
	}
	nonNeg("initialDelaySeconds", pr.InitialDelaySeconds)
	nonNeg("timeoutSeconds", pr.TimeoutSeconds)
	nonNeg("periodSeconds", pr.PeriodSeconds)
	nonNeg("successThreshold", pr.SuccessThreshold)
	nonNeg("failureThreshold", pr.FailureThreshold)
	if successMustBeOne && pr.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(p.Child("successThreshold"), pr.SuccessThreshold, "must be 1"))
	}
	if g := pr.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	return errs
}

func validateProbePort(port intstr.IntOrString, c *v1.Container, p *field.Path) field.ErrorList {
	if port.Type == intstr.Int {
		var errs field.ErrorList
		for _, msg := range validation.IsValidPortNum(port.IntValue()) {
			errs = append(errs, field.Invalid(p, port.IntValue(), msg))
		}
		return errs
	}
	if msgs := validation.IsValidPortName(port.StrVal); len(msgs) != 0 {
		return field.ErrorList{field.Invalid(p, port.StrVal, strings.Join(msgs, "; "))}
	}
	if _, ok := ProbePort(port, c); !ok {
		return field.ErrorList{field.Invalid(p, port.StrVal, "must name one of the container's ports")}
	}
	return nil
}
