package podspec

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1"}}}},
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"host":                      v1.PullNever,
		"":                          v1.PullNever,
		"busybox":                   v1.PullAlways,
		"busybox:latest":            v1.PullAlways,
		"busybox:1.36":              v1.PullIfNotPresent,
		"localhost:5000/busybox":    v1.PullAlways,
		"localhost:5000/busybox:1":  v1.PullIfNotPresent,
		"busybox@sha256:" + hex64(): v1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func hex64() string { return strings.Repeat("a", 64) }

func TestSetDefaults(t *testing.T) {
	pod := basePod()
	pod.Spec.Containers[0].Image = "nginx"
	pod.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80}}
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	SetDefaults(pod)

	s := pod.Spec
	if s.RestartPolicy != v1.RestartPolicyAlways || s.DNSPolicy != v1.DNSClusterFirst || *s.TerminationGracePeriodSeconds != 30 {
		t.Fatalf("pod defaults not applied: %+v", s)
	}
	c := s.Containers[0]
	if c.ImagePullPolicy != v1.PullAlways || c.TerminationMessagePath != "/dev/termination-log" || c.Ports[0].Protocol != v1.ProtocolTCP {
		t.Fatalf("container defaults not applied: %+v", c)
	}
	p := c.ReadinessProbe
	if p.TimeoutSeconds != 1 || p.PeriodSeconds != 10 || p.SuccessThreshold != 1 || p.FailureThreshold != 3 || p.HTTPGet.Path != "/" || p.HTTPGet.Scheme != v1.URISchemeHTTP {
		t.Fatalf("probe defaults not applied: %+v", p)
	}
	if got := c.Resources.Requests[v1.ResourceMemory]; got.String() != "64Mi" {
		t.Fatalf("requests not defaulted from limits: %v", c.Resources.Requests)
	}

	// Values the manifest sets are kept.
	pod2 := basePod()
	pod2.Spec.RestartPolicy = v1.RestartPolicyNever
	pod2.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
	pod2.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")},
	}
	SetDefaults(pod2)
	if pod2.Spec.RestartPolicy != v1.RestartPolicyNever || pod2.Spec.Containers[0].ImagePullPolicy != v1.PullAlways {
		t.Fatal("SetDefaults overwrote values from the manifest")
	}
	if q := pod2.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]; q.MilliValue() != 100 {
		t.Fatalf("explicit request overwritten by the limit: %s", q.String())
	}
}

func TestApplyStatic(t *testing.T) {
	seen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mk := func() *v1.Pod { p := basePod(); SetDefaults(p); return p }

	pod := mk()
	if err := ApplyStatic(pod, SourceFile, "/etc/pods/web.yaml", "Node-A", seen); err != nil {
		t.Fatal(err)
	}
	if pod.Name != "web-node-a" || pod.Namespace != "default" || pod.Spec.NodeName != "Node-A" {
		t.Fatalf("identity: name=%q ns=%q node=%q", pod.Name, pod.Namespace, pod.Spec.NodeName)
	}
	if len(pod.UID) != 32 || pod.Annotations[AnnotationConfigHash] != string(pod.UID) {
		t.Fatalf("uid %q hash %q", pod.UID, pod.Annotations[AnnotationConfigHash])
	}
	if pod.Annotations[AnnotationConfigSource] != "file" || pod.Annotations[AnnotationConfigSeen] != "2026-01-02T03:04:05Z" {
		t.Fatalf("annotations %v", pod.Annotations)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Effect != v1.TaintEffectNoExecute || pod.Spec.Tolerations[0].Operator != v1.TolerationOpExists {
		t.Fatalf("tolerations %v", pod.Spec.Tolerations)
	}
	if !IsStatic(pod) || FullName(pod) != "default/web-node-a" {
		t.Fatal("IsStatic/FullName")
	}

	uidOf := func(mut func(*v1.Pod), path, node string, at time.Time) string {
		p := mk()
		mut(p)
		if err := ApplyStatic(p, SourceFile, path, node, at); err != nil {
			t.Fatal(err)
		}
		return string(p.UID)
	}
	same := func(*v1.Pod) {}
	base := uidOf(same, "/etc/pods/web.yaml", "Node-A", seen)
	if base != string(pod.UID) {
		t.Fatal("UID is not deterministic")
	}
	if uidOf(same, "/etc/pods/web.yaml", "Node-A", seen.Add(time.Hour)) != base {
		t.Fatal("UID depends on the seen time")
	}
	for name, u := range map[string]string{
		"content": uidOf(func(p *v1.Pod) { p.Spec.Containers[0].Command = []string{"sleep", "2"} }, "/etc/pods/web.yaml", "Node-A", seen),
		"path":    uidOf(same, "/etc/pods/other.yaml", "Node-A", seen),
		"node":    uidOf(same, "/etc/pods/web.yaml", "node-b", seen),
	} {
		if u == base {
			t.Errorf("changing the %s did not change the UID", name)
		}
	}

	// An explicit UID is kept; tolerations are not duplicated.
	p := mk()
	p.UID = "fixed"
	p.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}}
	if err := ApplyStatic(p, SourceHTTP, "http://x", "n", seen); err != nil {
		t.Fatal(err)
	}
	if p.UID != "fixed" || len(p.Spec.Tolerations) != 1 || p.Annotations[AnnotationConfigSource] != "http" {
		t.Fatalf("uid %q tolerations %v", p.UID, p.Spec.Tolerations)
	}
}

func TestValidate(t *testing.T) {
	ptr := func(p v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &p }
	httpProbe := func(port intstr.IntOrString) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: port}}}
	}
	cases := []struct {
		name string
		mut  func(*v1.Pod)
		want []string // substrings of the aggregated error; none = valid
	}{
		{"valid", func(*v1.Pod) {}, nil},
		{"bad name", func(p *v1.Pod) { p.Name = "Web_1" }, []string{"metadata.name: Invalid value: \"Web_1\""}},
		{"no containers", func(p *v1.Pod) { p.Spec.Containers = nil }, []string{"spec.containers: Required value"}},
		{"duplicate container", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "c", Image: "host"}}
		}, []string{`spec.containers[0].name: Duplicate value: "c"`}},
		{"empty image", func(p *v1.Pod) { p.Spec.Containers[0].Image = "" }, []string{"spec.containers[0].image: Required value"}},
		{"bad port", func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 70000}} },
			[]string{"spec.containers[0].ports[0].containerPort: Invalid value: 70000"}},
		{"limit below request", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources = v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")},
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")},
			}
		}, []string{"spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1"}},
		{"extended resource", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources = v1.ResourceRequirements{
				Requests: v1.ResourceList{"example.com/dev": resource.MustParse("1")},
				Limits:   v1.ResourceList{"example.com/dev": resource.MustParse("1")},
			}
		}, nil},
		{"unknown resource", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits = v1.ResourceList{"gpu": resource.MustParse("1")}
		}, []string{"spec.containers[0].resources.limits[gpu]: Invalid value"}},
		{"liveness success threshold", func(p *v1.Pod) {
			pr := httpProbe(intstr.FromInt32(80))
			pr.SuccessThreshold = 2
			p.Spec.Containers[0].LivenessProbe = pr
		}, []string{"spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"}},
		{"readiness success threshold ok", func(p *v1.Pod) {
			pr := httpProbe(intstr.FromInt32(80))
			pr.SuccessThreshold = 2
			p.Spec.Containers[0].ReadinessProbe = pr
		}, nil},
		{"two handlers", func(p *v1.Pod) {
			pr := httpProbe(intstr.FromInt32(80))
			pr.Exec = &v1.ExecAction{Command: []string{"true"}}
			p.Spec.Containers[0].StartupProbe = pr
		}, []string{"spec.containers[0].startupProbe: Forbidden: may not specify more than 1 handler type"}},
		{"no handler", func(p *v1.Pod) { p.Spec.Containers[0].ReadinessProbe = &v1.Probe{} },
			[]string{"spec.containers[0].readinessProbe: Required value"}},
		{"named probe port missing", func(p *v1.Pod) { p.Spec.Containers[0].ReadinessProbe = httpProbe(intstr.FromString("http")) },
			[]string{`spec.containers[0].readinessProbe.httpGet.port: Invalid value: "http"`}},
		{"named probe port found", func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}
			p.Spec.Containers[0].ReadinessProbe = httpProbe(intstr.FromString("http"))
		}, nil},
		{"restart policy", func(p *v1.Pod) { p.Spec.RestartPolicy = "Sometimes" },
			[]string{`spec.restartPolicy: Unsupported value: "Sometimes"`}},
		{"init restart policy", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Image: "host", RestartPolicy: ptr("OnFailure")}}
		}, []string{`spec.initContainers[0].restartPolicy: Unsupported value: "OnFailure"`}},
		{"sidecar ok", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Image: "host", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways),
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, SuccessThreshold: 1}}}
		}, nil},
		{"init probe forbidden", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Image: "host",
				LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, SuccessThreshold: 1}}}
		}, []string{"spec.initContainers[0].livenessProbe: Forbidden"}},
		{"container restart policy", func(p *v1.Pod) { p.Spec.Containers[0].RestartPolicy = ptr(v1.ContainerRestartPolicyAlways) }, nil},
		{"container restart policy unknown", func(p *v1.Pod) { p.Spec.Containers[0].RestartPolicy = ptr("Sometimes") },
			[]string{`spec.containers[0].restartPolicy: Unsupported value: "Sometimes"`}},
		{"restart rule ok", func(p *v1.Pod) {
			p.Spec.Containers[0].RestartPolicy = ptr(v1.ContainerRestartPolicyNever)
			p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
		}, nil},
		{"restart rule needs the container's policy and exit codes", func(p *v1.Pod) {
			p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: "RestartSomething"}}
		}, []string{"spec.containers[0].restartPolicy: Required value", `spec.containers[0].restartPolicyRules[0].action: Unsupported value: "RestartSomething"`,
			"spec.containers[0].restartPolicyRules[0].exitCodes: Required value"}},
		{"mount without volume", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, []string{`spec.containers[0].volumeMounts[0].name: Not found: "data"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			tc.mut(pod)
			SetDefaults(pod)
			errs := Validate(pod)
			if len(tc.want) == 0 {
				if len(errs) != 0 {
					t.Fatalf("unexpected errors: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("no error, want %q", tc.want)
			}
			got := errs.ToAggregate().Error()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("error %q does not contain %q", got, w)
				}
			}
		})
	}
}
