package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/pki"
	"github.com/minilet/minilet/internal/server"
)

// agentData feeds the real HTTP server (internal/server) with canned
// objects, so the commands are tested against the real API.
type agentData struct {
	pods    []v1.Pod
	node    *v1.Node
	events  []v1.Event
	logDir  string
	summary *statsapi.Summary
	devices []server.Device
}

func (a *agentData) Pods() []v1.Pod           { return a.pods }
func (a *agentData) Node() *v1.Node           { return a.node }
func (a *agentData) Devices() []server.Device { return a.devices }
func (a *agentData) Summary(context.Context) (*statsapi.Summary, error) {
	return a.summary, nil
}

func (a *agentData) Events(ns, name string) ([]v1.Event, error) {
	var out []v1.Event
	for _, e := range a.events {
		if ns == "" || (e.InvolvedObject.Namespace == ns && e.InvolvedObject.Name == name) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (a *agentData) ContainerLogPath(ns, pod, ctr string, previous bool) (string, error) {
	p := filepath.Join(a.logDir, ns+"_"+pod, ctr, "0.log")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("container %q in pod %s/%s: %w", ctr, ns, pod, errdefs.ErrNotFound)
	}
	return p, nil
}

func ts(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }

func testAgent(t *testing.T) *agentData {
	t.Helper()
	a := &agentData{logDir: t.TempDir()}
	web := v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node1", Namespace: "default", CreationTimestamp: ts(10 * time.Minute),
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"kubernetes.io/config.source": "file"}},
		Spec: v1.PodSpec{NodeName: "node1", Containers: []v1.Container{{
			Name: "nginx", Image: "host", Command: []string{"/bin/sleep", "1000"},
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")},
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
			},
			LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 5},
			VolumeMounts:  []v1.VolumeMount{{Name: "logs", MountPath: "/var/log/nginx"}, {Name: "conf", MountPath: "/etc/nginx/nginx.conf", SubPath: "nginx.conf", ReadOnly: true}},
		}},
			SecurityContext: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			Volumes: []v1.Volume{
				{Name: "logs", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "conf", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nginx"}}}},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/srv/www"}}},
			},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.5", HostIP: "10.0.0.5", StartTime: &metav1.Time{Time: now.Add(-10 * time.Minute)},
			Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{withLastExit(running("nginx", true, 2), 3*time.Minute)}},
	}
	multi := v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-node1", Namespace: "kube-system", CreationTimestamp: ts(2 * time.Hour)},
		Spec:       v1.PodSpec{NodeName: "node1", Containers: []v1.Container{{Name: "db"}, {Name: "backup"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			running("db", true, 0), waiting("backup", "CrashLoopBackOff", 5)}},
	}
	a.pods = []v1.Pod{web, multi}
	a.node = &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1", CreationTimestamp: ts(26 * time.Hour),
			Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
		Status: v1.NodeStatus{
			Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}},
			Addresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}},
			NodeInfo:    v1.NodeSystemInfo{KubeletVersion: "v0.1.0-minilet", OSImage: "Debian 12", KernelVersion: "6.1", ContainerRuntimeVersion: "embedded://0.1"},
			Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"), "example.com/gpu": resource.MustParse("2")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("3Gi"), "example.com/gpu": resource.MustParse("2")},
		},
	}
	a.events = []v1.Event{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-node1.1"}, Type: "Normal", Reason: "Started", Message: "Started container nginx",
			InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-node1", FieldPath: "spec.containers{nginx}"},
			Source:         v1.EventSource{Component: "kubelet", Host: "node1"}, Count: 3, FirstTimestamp: ts(10 * time.Minute), LastTimestamp: ts(3 * time.Minute)},
		{ObjectMeta: metav1.ObjectMeta{Name: "node1.1"}, Type: "Normal", Reason: "NodeReady", Message: "Node node1 status is now: NodeReady",
			InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "node1"},
			Source:         v1.EventSource{Component: "kubelet", Host: "node1"}, Count: 1, FirstTimestamp: ts(26 * time.Hour), LastTimestamp: ts(26 * time.Hour)},
	}
	cores, ws := uint64(12_000_000), uint64(48*1024*1024)
	a.summary = &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "node1",
		CPU: &statsapi.CPUStats{UsageNanoCores: &[]uint64{750_000_000}[0]}, Memory: &statsapi.MemoryStats{WorkingSetBytes: &[]uint64{1536 * 1024 * 1024}[0]}},
		Pods: []statsapi.PodStats{{PodRef: statsapi.PodReference{Name: "web-node1", Namespace: "default"},
			Containers: []statsapi.ContainerStats{{Name: "nginx", CPU: &statsapi.CPUStats{UsageNanoCores: &cores}, Memory: &statsapi.MemoryStats{WorkingSetBytes: &ws}}}}}}
	a.devices = []server.Device{{Resource: "example.com/gpu", ID: "gpu0", Health: "Healthy", Pod: "default/web-node1", Container: "nginx"}, {Resource: "example.com/gpu", ID: "gpu1", Health: "Unhealthy"}}

	dir := filepath.Join(a.logDir, "default_web-node1", "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "0.log"), []byte(
		"2026-11-22T05:59:00.000000001Z stdout F hello\n2026-11-22T05:59:01.000000001Z stderr F world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}

func startAgent(t *testing.T, a *agentData) string {
	t.Helper()
	srv := server.New(server.Config{Pods: a, Node: a, Events: a, Logs: a, Stats: a, Devices: a, LogPollInterval: 20 * time.Millisecond})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func run(t *testing.T, url string, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "minilet", SilenceUsage: true, SilenceErrors: true}
	AddCommands(root, Options{Now: func() time.Time { return now }})
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	if url != "" {
		args = append([]string{"--server", url}, args...)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// table normalises column padding so expectations stay readable.
func table(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestGetCommands(t *testing.T) {
	url := startAgent(t, testAgent(t))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "pods"}, `NAMESPACE NAME READY STATUS RESTARTS AGE
default web-node1 1/1 Running 2 (3m ago) 10m
kube-system db-node1 1/2 CrashLoopBackOff 5 120m`},
		{[]string{"get", "pods", "-n", "default", "-o", "wide"}, `NAME READY STATUS RESTARTS AGE IP NODE
web-node1 1/1 Running 2 (3m ago) 10m 10.0.0.5 node1`},
		{[]string{"get", "events"}, `LAST SEEN TYPE REASON OBJECT MESSAGE
26h Normal NodeReady node/node1 Node node1 status is now: NodeReady
3m Normal Started pod/web-node1 Started container nginx`},
		{[]string{"get", "events", "-o", "wide"}, `LAST SEEN TYPE REASON OBJECT SUBOBJECT SOURCE MESSAGE FIRST SEEN COUNT NAME
26h Normal NodeReady node/node1 kubelet, node1 Node node1 status is now: NodeReady 26h 1 node1.1
3m Normal Started pod/web-node1 spec.containers{nginx} kubelet, node1 Started container nginx 10m 3 web-node1.1`},
		{[]string{"get", "node"}, `NAME STATUS ROLES AGE VERSION
node1 Ready control-plane 26h v0.1.0-minilet`},
		{[]string{"get", "node", "-o", "wide"}, `NAME STATUS ROLES AGE VERSION INTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME
node1 Ready control-plane 26h v0.1.0-minilet 10.0.0.5 Debian 12 6.1 embedded://0.1

RESOURCE CAPACITY ALLOCATABLE
cpu 2 1500m
example.com/gpu 2 2
memory 4Gi 3Gi`},
		{[]string{"get", "devices"}, `RESOURCE DEVICE HEALTH POD CONTAINER
example.com/gpu gpu0 Healthy default/web-node1 nginx
example.com/gpu gpu1 Unhealthy <none> <none>`},
		{[]string{"top", "pods"}, `NAMESPACE NAME CPU(cores) MEMORY(bytes)
default web-node1 12m 48Mi`},
		{[]string{"top", "node"}, `NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
node1 750m 50% 1536Mi 50%`},
		{[]string{"logs", "web"}, "hello\nworld"},
		{[]string{"logs", "web-node1", "--tail", "1", "--timestamps"}, "2026-11-22T05:59:01.000000001Z world"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, _, err := run(t, url, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got := table(out); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestGetPodsJSONAndYAML(t *testing.T) {
	url := startAgent(t, testAgent(t))
	out, _, err := run(t, url, "get", "pods", "web-node1", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	// One name, one object, as kubectl prints it.
	var pod v1.Pod
	if err := json.Unmarshal([]byte(out), &pod); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if pod.Kind != "Pod" || pod.APIVersion != "v1" || pod.Name != "web-node1" {
		t.Errorf("one name should print the Pod: %+v", pod.TypeMeta)
	}
	// Several names, a list.
	out, _, err = run(t, url, "get", "pods", "web", "db-node1", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if list.Kind != "PodList" || len(list.Items) != 2 || list.Items[0].Name != "web-node1" || list.Items[1].Name != "db-node1" {
		t.Errorf("unexpected list: %+v", list)
	}
	out, _, err = run(t, url, "get", "node", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "kind: Node\n") || !strings.Contains(out, "name: node1\n") {
		t.Errorf("yaml output:\n%s", out)
	}
	if _, _, err := run(t, url, "get", "pods", "-o", "table"); err == nil || !strings.Contains(err.Error(), `"table"`) {
		t.Errorf("bad -o accepted: %v", err)
	}
	if _, _, err := run(t, url, "get", "pods", "ghost"); !errdefs.IsNotFound(err) {
		t.Errorf("missing pod: %v", err)
	}
}

func TestDescribePod(t *testing.T) {
	url := startAgent(t, testAgent(t))
	out, _, err := run(t, url, "describe", "pod", "web")
	if err != nil {
		t.Fatal(err)
	}
	want := `Name: web-node1
Namespace: default
Node: node1/10.0.0.5
Start Time: Sun, 22 Nov 2026 05:50:00 +0000
Labels: app=web
Annotations: kubernetes.io/config.source: file
Status: Running
SeccompProfile: RuntimeDefault
IP: 10.0.0.5
Containers:
nginx:
Image: host
Command: /bin/sleep 1000
State: Running
Started: Sun, 22 Nov 2026 05:00:00 +0000
Last State: Terminated
Reason: Error
Exit Code: 1
Started: <unknown>
Finished: Sun, 22 Nov 2026 05:57:00 +0000
Ready: True
Restart Count: 2
Limits:
cpu: 500m
Requests:
cpu: 250m
Liveness: http-get http://:8080/healthz delay=0s timeout=1s period=5s #success=1 #failure=3
Environment: <none>
Mounts:
/etc/nginx/nginx.conf from conf (ro,path="nginx.conf")
/var/log/nginx from logs (rw)
Conditions:
Type Status
Ready True
Volumes:
logs:
Type: EmptyDir (a temporary directory that shares a pod's lifetime)
Medium:
SizeLimit: <unset>
conf:
Type: ConfigMap (a volume populated by a ConfigMap)
Name: nginx
Optional: false
host:
Type: HostPath (bare host directory volume)
Path: /srv/www
HostPathType:
QoS Class: Burstable
Node-Selectors: <none>
Events:
Type Reason Age From Message
---- ------ ---- ---- -------
Normal Started 3m (x3 over 10m) kubelet Started container nginx`
	if got := table(out); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestDescribeNode(t *testing.T) {
	url := startAgent(t, testAgent(t))
	out, _, err := run(t, url, "describe", "node")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Name: node1", "Ready True", "InternalIP: 10.0.0.5", "Capacity:\ncpu: 2", "Allocatable:\ncpu: 1500m", "example.com/gpu: 2", "Kubelet Version: v0.1.0-minilet"} {
		if !strings.Contains(table(out), want) {
			t.Errorf("describe node lacks %q:\n%s", want, out)
		}
	}
}

func TestPodResolutionAndContainerChoice(t *testing.T) {
	a := testAgent(t)
	a.pods = append(a.pods, v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-node2", Namespace: "default"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "nginx"}}}})
	url := startAgent(t, a)

	_, _, err := run(t, url, "describe", "pod", "we")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "web-node1, web-node2") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	// The manifest's name finds its static pod on this node, NAME-NODENAME.
	if out, _, err := run(t, url, "describe", "pod", "web"); err != nil || table(out)[:15] != "Name: web-node1" {
		t.Errorf("describe pod web: %v\n%s", err, out)
	}
	if _, _, err := run(t, url, "describe", "pod", "nothing"); !errdefs.IsNotFound(err) {
		t.Errorf("unknown pod: %v", err)
	}
	_, _, err = run(t, url, "logs", "db-node1", "-n", "kube-system")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "[db backup]") {
		t.Errorf("multi-container pod without -c: %v", err)
	}
	_, _, err = run(t, url, "logs", "db-node1", "-n", "kube-system", "-c", "db")
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `container "db" in pod kube-system/db-node1`) {
		t.Errorf("missing log file should be the server's 404: %v", err)
	}
	if _, _, err := run(t, url, "logs", "web-node1", "-c", "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("unknown container: %v", err)
	}
}

func TestEmptyAndDisabledEndpoints(t *testing.T) {
	srv := httptest.NewServer(server.New(server.Config{Pods: &agentData{}}).Handler())
	defer srv.Close()
	out, _, err := run(t, srv.URL, "get", "pods")
	if err != nil || strings.TrimSpace(out) != "No resources found." {
		t.Errorf("empty pods: %q %v", out, err)
	}
	for _, what := range []string{"images", "devices"} {
		out, errOut, err := run(t, srv.URL, "get", what)
		if err != nil || out != "" || !strings.Contains(errOut, "No "+what+" found ("+what+" not enabled on this agent)") {
			t.Errorf("get %s with the provider off: out %q, stderr %q, err %v", what, out, errOut, err)
		}
	}
	if _, _, err := run(t, srv.URL, "get", "node"); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "node not enabled") {
		t.Errorf("get node with the provider off: %v", err)
	}
}

// The CLI finds a local agent through its root dir: the address file, the
// local admin's client certificate and the pinned serving certificate.
func TestServerFromAddrFile(t *testing.T) {
	a := testAgent(t)
	root := t.TempDir()
	dir := pki.Dir(root)
	caPEM, err := pki.EnsureLocalAdmin(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := pki.EnsureServing(dir, "node1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _ := os.ReadFile(certFile)
	if err := pki.WritePin(dir, certPEM); err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	ts := httptest.NewUnstartedServer(server.New(server.Config{Pods: a, Node: a}).Handler())
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	if err := server.WriteAddrFile(root, strings.TrimPrefix(ts.URL, "https://")); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "--root-dir", root, "get", "node")
	if err != nil || !strings.Contains(out, "node1") {
		t.Fatalf("addr file not used: %q %v", out, err)
	}
	// Another server at the same address with another certificate is not
	// the agent the CLI recorded.
	if err := pki.WritePin(dir, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "", "--root-dir", root, "get", "node"); err == nil {
		t.Fatal("the CLI trusted a server whose certificate is not the pinned one")
	}
}

func TestUnreachableAgent(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	_, _, err := run(t, url, "get", "pods")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach the agent") {
		t.Fatalf("got %v", err)
	}
}

func TestLogsFollow(t *testing.T) {
	a := testAgent(t)
	url := startAgent(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := &cobra.Command{Use: "minilet", SilenceUsage: true, SilenceErrors: true}
	AddCommands(root, Options{Now: func() time.Time { return now }})
	out := &syncWriter{}
	root.SetOut(out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"--server", url, "logs", "web", "-f", "--tail", "1"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	waitOutput(t, out, "world\n")
	f, err := os.OpenFile(filepath.Join(a.logDir, "default_web-node1", "nginx", "0.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("2026-11-22T05:59:02.000000001Z stdout F again\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "world\nagain\n")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("logs -f returned %v after interrupt, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f did not stop on cancel")
	}
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "", "version")
	if err != nil || !strings.HasPrefix(out, "minilet ") || !strings.Contains(out, "Kubernetes v1.") {
		t.Fatalf("%q %v", out, err)
	}
}
