package kuberuntime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// maxHostnameLen is the kernel's limit on a hostname (and a DNS label's).
const maxHostnameLen = 63

// podHostname is the pod's hostname and DNS domain as the kubelet makes
// them: spec.hostname or the pod's name, cut to 63 characters; the domain
// <subdomain>.<namespace>.svc.<cluster domain> when the pod has a
// subdomain; spec.hostnameOverride, when set, replaces both (it names the
// host only, with no domain).
func podHostname(pod *v1.Pod, clusterDomain string) (hostname, domain string) {
	if o := pod.Spec.HostnameOverride; o != nil && *o != "" {
		return *o, ""
	}
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if len(hostname) > maxHostnameLen {
		hostname = strings.TrimRight(hostname[:maxHostnameLen], "-.")
	}
	if pod.Spec.Subdomain != "" && clusterDomain != "" {
		domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return hostname, domain
}

// kernelHostname is the name the pod's UTS namespace gets: the hostname,
// or with setHostnameAsFQDN and a domain the fully qualified name, which
// must then fit the kernel's 64 bytes.
func kernelHostname(pod *v1.Pod, clusterDomain string) (string, error) {
	hostname, domain := podHostname(pod, clusterDomain)
	if pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN || domain == "" {
		return hostname, nil
	}
	fqdn := hostname + "." + domain
	if len(fqdn) > maxHostnameLen+1 {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxHostnameLen+1, len(fqdn))
	}
	return fqdn, nil
}
