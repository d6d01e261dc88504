package kuberuntime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A pod's name resolution, as the kubelet sets it up: the runtime writes
// the pod's resolv.conf from the sandbox's DNSConfig, which follows the
// pod's dnsPolicy and dnsConfig, and every container gets the pod's
// kubelet-managed /etc/hosts.

// The kubelet's limits on a resolv.conf (glibc's and its own).
const (
	maxDNSNameservers   = 3
	maxDNSSearchDomains = 32
	maxDNSSearchChars   = 2048
)

// dnsConfig is the DNSConfig of pod's sandbox; nil means the runtime's
// default (the host's resolv.conf).
func (m *Manager) dnsConfig(pod *v1.Pod) *runtimeapi.DNSConfig {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault // ClusterFirstWithHostNet is the opt-in
	}
	if (policy == v1.DNSClusterFirst || policy == v1.DNSClusterFirstWithHostNet) && len(m.cfg.ClusterDNS) == 0 {
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "MissingClusterDNS",
			"pod: %q. kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.",
			podDesc(pod), policy, v1.DNSDefault)
		policy = v1.DNSDefault
	}
	cfg := &runtimeapi.DNSConfig{}
	switch policy {
	case v1.DNSNone:
	case v1.DNSDefault:
		if m.cfg.ResolvConf == "" {
			break
		}
		host, err := readResolvConf(m.cfg.ResolvConf)
		if err != nil {
			m.log.Warn("cannot read --resolv-conf; pods get no name servers from it", "path", m.cfg.ResolvConf, "err", err)
			break
		}
		cfg = host
	default: // ClusterFirst, ClusterFirstWithHostNet
		cfg.Servers = append([]string(nil), m.cfg.ClusterDNS...)
		domain := m.cfg.ClusterDomain
		if domain != "" {
			cfg.Searches = []string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}
		}
		if m.cfg.ResolvConf != "" {
			if host, err := readResolvConf(m.cfg.ResolvConf); err == nil {
				cfg.Searches = append(cfg.Searches, host.Searches...)
			}
		}
		cfg.Options = []string{"ndots:5"}
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = appendUnique(cfg.Servers, dc.Nameservers...)
		cfg.Searches = appendUnique(cfg.Searches, dc.Searches...)
		cfg.Options = mergeDNSOptions(cfg.Options, dc.Options)
	}
	m.limitDNS(pod, cfg)
	return cfg
}

// limitDNS trims cfg to what a resolver reads, with the kubelet's event.
func (m *Manager) limitDNS(pod *v1.Pod, cfg *runtimeapi.DNSConfig) {
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "DNSConfigForming",
			"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(cfg.Servers, " "))
	}
	n, chars := 0, 0
	for _, s := range cfg.Searches {
		if n == maxDNSSearchDomains || chars+len(s)+1 > maxDNSSearchChars {
			break
		}
		n, chars = n+1, chars+len(s)+1
	}
	if n < len(cfg.Searches) {
		cfg.Searches = cfg.Searches[:n]
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "DNSConfigForming",
			"Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(cfg.Searches, " "))
	}
}

// readResolvConf reads the name servers, search domains and options of a
// resolv.conf.
func readResolvConf(path string) (*runtimeapi.DNSConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	cfg := &runtimeapi.DNSConfig{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search":
			cfg.Searches = fields[1:] // the last search line wins
		case "options":
			cfg.Options = append(cfg.Options, fields[1:]...)
		}
	}
	return cfg, sc.Err()
}

func appendUnique(list []string, more ...string) []string {
	seen := map[string]bool{}
	for _, s := range list {
		seen[s] = true
	}
	for _, s := range more {
		if !seen[s] {
			seen[s] = true
			list = append(list, s)
		}
	}
	return list
}

// mergeDNSOptions adds the pod's options to base, a pod option replacing
// one of the same name.
func mergeDNSOptions(base []string, pod []v1.PodDNSConfigOption) []string {
	index := map[string]int{}
	out := append([]string(nil), base...)
	for i, o := range out {
		name, _, _ := strings.Cut(o, ":")
		index[name] = i
	}
	for _, o := range pod {
		s := o.Name
		if o.Value != nil {
			s += ":" + *o.Value
		}
		if i, ok := index[o.Name]; ok {
			out[i] = s
			continue
		}
		index[o.Name] = len(out)
		out = append(out, s)
	}
	return out
}

// hostsMount writes the pod's kubelet-managed hosts file
// (PodsDir/<uid>/etc-hosts) and returns its mount at /etc/hosts for c,
// unless c mounts something there itself or the pod has no IP yet.
func (m *Manager) hostsMount(pod *v1.Pod, c *v1.Container, podIP string) (*runtimeapi.Mount, error) {
	if m.cfg.PodsDir == "" || podIP == "" {
		return nil, nil
	}
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == "/etc/hosts" {
			return nil, nil
		}
	}
	content, err := m.hostsFile(pod, podIP)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(m.cfg.PodsDir, string(pod.UID), "etc-hosts")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return nil, fmt.Errorf("write the hosts file of pod %s: %w", podDesc(pod), err)
	}
	return &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: path}, nil
}

// hostsFile is the kubelet's hosts file for pod: for a pod on the host's
// network the node's own, else localhost and the pod's name on its IP;
// then the pod's hostAliases.
func (m *Manager) hostsFile(pod *v1.Pod, podIP string) ([]byte, error) {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		host, err := os.ReadFile("/etc/hosts")
		if err != nil {
			return nil, fmt.Errorf("read the node's /etc/hosts: %w", err)
		}
		b.WriteString("# Kubernetes-managed hosts file (host network).\n")
		b.Write(host)
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n")
		b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		hostname, domain := podHostname(pod, m.cfg.ClusterDomain)
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", podIP, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", podIP, hostname)
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return []byte(b.String()), nil
}
