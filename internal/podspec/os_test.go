package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestAdmitOS(t *testing.T) {
	for _, c := range []struct {
		name   string
		spec   v1.PodSpec
		reason string
	}{
		{"no OS asked", v1.PodSpec{}, ""},
		{"linux", v1.PodSpec{OS: &v1.PodOS{Name: v1.Linux}, NodeSelector: map[string]string{v1.LabelOSStable: "linux"}}, ""},
		{"windows by spec.os", v1.PodSpec{OS: &v1.PodOS{Name: v1.Windows}}, ReasonPodOSNotSupported},
		{"windows by node selector", v1.PodSpec{NodeSelector: map[string]string{v1.LabelOSStable: "windows"}}, ReasonPodOSSelectorNodeLabelDoesNotMatch},
	} {
		ok, reason, msg := AdmitOS(&v1.Pod{Spec: c.spec})
		if ok != (c.reason == "") || reason != c.reason || (!ok && msg == "") {
			t.Errorf("%s: AdmitOS = %v, %q, %q; want reason %q", c.name, ok, reason, msg, c.reason)
		}
	}
}
