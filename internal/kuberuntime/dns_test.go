package kuberuntime

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodDNSConfig(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# host\nnameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	two := "2"
	for _, tc := range []struct {
		name       string
		clusterDNS []string
		spec       v1.PodSpec
		want       *runtimeapi.DNSConfig
		event      string
	}{
		{name: "ClusterFirst", clusterDNS: []string{"10.0.0.10"}, spec: v1.PodSpec{},
			want: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}},
		{name: "ClusterFirst without cluster DNS falls back to Default", spec: v1.PodSpec{DNSPolicy: v1.DNSClusterFirst},
			want:  &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"timeout:2"}},
			event: "MissingClusterDNS"},
		{name: "host network uses the node's", clusterDNS: []string{"10.0.0.10"}, spec: v1.PodSpec{HostNetwork: true},
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"timeout:2"}}},
		{name: "ClusterFirstWithHostNet", clusterDNS: []string{"10.0.0.10"}, spec: v1.PodSpec{HostNetwork: true, DNSPolicy: v1.DNSClusterFirstWithHostNet},
			want: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}},
		{name: "None with dnsConfig", spec: v1.PodSpec{DNSPolicy: v1.DNSNone, DNSConfig: &v1.PodDNSConfig{
			Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}}}},
			want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:2", "edns0"}}},
		{name: "dnsConfig options replace the policy's", clusterDNS: []string{"10.0.0.10"}, spec: v1.PodSpec{DNSConfig: &v1.PodDNSConfig{Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}},
			want: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:2"}}},
		{name: "at most three name servers", spec: v1.PodSpec{DNSPolicy: v1.DNSNone, DNSConfig: &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"}}},
			want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3"}}, event: "DNSConfigForming"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ClusterDNS, c.ClusterDomain, c.ResolvConf = tc.clusterDNS, "cluster.local", resolv })
			m, rec := e.m, e.rec
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"}, Spec: tc.spec}
			got := m.dnsConfig(pod)
			if !reflect.DeepEqual(got.Servers, tc.want.Servers) || !reflect.DeepEqual(got.Searches, tc.want.Searches) || !reflect.DeepEqual(got.Options, tc.want.Options) {
				t.Errorf("DNS config = %v, want %v", got, tc.want)
			}
			if tc.event != "" && !rec.Has(tc.event) {
				t.Errorf("no %s event: %v", tc.event, rec.Events())
			}
			if tc.event == "" && len(rec.Events()) > 0 {
				t.Errorf("unexpected events: %v", rec.Events())
			}
		})
	}
}

// A pod on the host's network gets a kubelet-managed /etc/hosts too (the
// node's, then its hostAliases), though the runtime reports no IP for its
// sandbox: the node's IP is its IP, as the kubelet takes it.
func TestHostNetworkPodGetsItsHostAliases(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyNever, nil, "a")
	pod.Spec.HostNetwork = true
	pod.Spec.HostAliases = []v1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo", "bar"}}}
	if res := e.sync(pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	data, err := os.ReadFile(filepath.Join(e.cfg.PodsDir, string(pod.UID), "etc-hosts"))
	if err != nil {
		t.Fatalf("no hosts file for the host-network pod: %v", err)
	}
	for _, want := range []string{"# Kubernetes-managed hosts file (host network).\n", "\n123.45.67.89\tfoo\tbar\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("hosts file lacks %q:\n%s", want, data)
		}
	}
}

func TestPodHostsFile(t *testing.T) {
	m := newEnv(t, func(c *Config) { c.ClusterDomain = "cluster.local" }).m
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "u1"}, Spec: v1.PodSpec{
		Hostname: "h", Subdomain: "sub",
		HostAliases: []v1.HostAlias{{IP: "192.0.2.7", Hostnames: []string{"foo.local", "bar.local"}}},
	}}
	mnt, err := m.hostsMount(pod, &v1.Container{Name: "c"}, "10.85.0.9")
	if err != nil || mnt == nil || mnt.ContainerPath != "/etc/hosts" {
		t.Fatalf("hostsMount = %v, %v", mnt, err)
	}
	data, err := os.ReadFile(mnt.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Kubernetes-managed hosts file.\n", "127.0.0.1\tlocalhost\n", "10.85.0.9\th.sub.ns1.svc.cluster.local\th\n", "# Entries added by HostAliases.\n192.0.2.7\tfoo.local\tbar.local\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("hosts file lacks %q:\n%s", want, data)
		}
	}
	// A container that mounts its own /etc/hosts keeps it.
	if mnt, _ := m.hostsMount(pod, &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/etc/hosts"}}}, "10.85.0.9"); mnt != nil {
		t.Errorf("hosts file mounted over the container's own /etc/hosts")
	}
}
