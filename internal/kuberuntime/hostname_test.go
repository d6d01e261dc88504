package kuberuntime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod's hostname, domain and kernel hostname as the kubelet makes them.
func TestPodHostname(t *testing.T) {
	str := func(s string) *string { return &s }
	yes := true
	long := strings.Repeat("a", 62) + "-b"
	for _, c := range []struct {
		name                 string
		spec                 v1.PodSpec
		podName              string
		host, domain, kernel string
		err                  bool
	}{
		{name: "pod name", podName: "web", host: "web", kernel: "web"},
		{name: "spec.hostname", podName: "web", spec: v1.PodSpec{Hostname: "h"}, host: "h", kernel: "h"},
		{name: "cut to 63, no trailing dash", podName: long, host: strings.Repeat("a", 62), kernel: strings.Repeat("a", 62)},
		{name: "subdomain", podName: "web", spec: v1.PodSpec{Subdomain: "sub"}, host: "web", domain: "sub.ns.svc.cluster.local", kernel: "web"},
		{name: "FQDN as hostname", podName: "web", spec: v1.PodSpec{Subdomain: "sub", SetHostnameAsFQDN: &yes},
			host: "web", domain: "sub.ns.svc.cluster.local", kernel: "web.sub.ns.svc.cluster.local"},
		{name: "FQDN too long", podName: strings.Repeat("x", 50), spec: v1.PodSpec{Subdomain: "sub", SetHostnameAsFQDN: &yes},
			host: strings.Repeat("x", 50), domain: "sub.ns.svc.cluster.local", err: true},
		{name: "hostnameOverride wins over hostname and subdomain", podName: "web",
			spec: v1.PodSpec{Hostname: "h", Subdomain: "sub", HostnameOverride: str("override-host")}, host: "override-host", kernel: "override-host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.podName, Namespace: "ns"}, Spec: c.spec}
			host, domain := podHostname(pod, "cluster.local")
			if host != c.host || domain != c.domain {
				t.Errorf("podHostname = %q, %q; want %q, %q", host, domain, c.host, c.domain)
			}
			kernel, err := kernelHostname(pod, "cluster.local")
			if (err != nil) != c.err || kernel != c.kernel {
				t.Errorf("kernelHostname = %q, %v; want %q, error %v", kernel, err, c.kernel, c.err)
			}
		})
	}
}
