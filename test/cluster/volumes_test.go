package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// An ordinary pod, with the service-account token the API server's
// admission mounts by default (the kube-api-access projected volume):
// its process finds the token, the cluster CA and its namespace where
// every client library looks, and calls the API server with them as its
// service account. ConfigMap and secret volumes and env are there too, a
// secret's files on a tmpfs.
func TestDefaultServiceAccountPodTalksToTheAPIServer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cs := e.srv.Admin
	if _, err := cs.CoreV1().ConfigMaps("default").Create(e.ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello", "color": "blue"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("default").Create(e.ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "hunter2"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	script := `set -e
cat ` + sa + `/namespace; echo
cat /etc/settings/greeting; echo
echo "password=$PASSWORD color=$COLOR"
curl -sS --cacert ` + sa + `/ca.crt -H "Authorization: Bearer $(cat ` + sa + `/token)" \
  -H 'Content-Type: application/json' -X POST \
  -d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' \
  ` + e.srv.PodURL + `/apis/authentication.k8s.io/v1/selfsubjectreviews
echo
exec sleep 1000`
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "talker-sa", Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                      e.a.NodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Volumes: []v1.Volume{
				{Name: "settings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}},
				{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
			},
			Containers: []v1.Container{{
				Name: "main", Image: "host", Command: []string{"sh", "-c", script},
				VolumeMounts: []v1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}, {Name: "creds", MountPath: "/etc/creds", ReadOnly: true}},
				Env: []v1.EnvVar{
					{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
					{Name: "COLOR", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, Key: "color"}}},
				},
			}},
		},
	}
	created := e.create(p)
	if created.Spec.AutomountServiceAccountToken != nil || !hasProjectedToken(created) {
		t.Fatalf("the API server did not add the default token volume: %+v", created.Spec.Volumes)
	}
	e.waitPod("the pod Running", p.Name, runningReady)
	want := []string{"default", "hello", "password=hunter2 color=blue", `"username": "system:serviceaccount:default:default"`, `"talker-sa"`}
	e.eventually("the pod's output", func() (bool, string) {
		raw, err := cs.CoreV1().Pods("default").GetLogs(p.Name, &v1.PodLogOptions{}).DoRaw(e.ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if !strings.Contains(string(raw), w) {
				return false, fmt.Sprintf("no %q in %q", w, raw)
			}
		}
		return true, ""
	})

	// On the node: the secret's files on a tmpfs, under the pod's directory.
	dir := filepath.Join(e.a.RootDir, "pods", string(created.UID), "volumes", "kubernetes.io~secret", "creds")
	if b, err := os.ReadFile(filepath.Join(dir, "password")); err != nil || string(b) != "hunter2" {
		t.Errorf("secret file: %q %v", b, err)
	}
	if !onTmpfs(t, dir) {
		t.Errorf("%s is not a tmpfs mount", dir)
	}

	// Deleting the pod removes its volumes from the node.
	if err := cs.CoreV1().Pods("default").Delete(e.ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("the pod's volumes removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(e.a.RootDir, "pods", string(created.UID), "volumes"))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
}

func hasProjectedToken(p *v1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// onTmpfs reports whether dir is a tmpfs mount point (mountinfo).
func onTmpfs(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[4] != dir {
			continue
		}
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				return f[i+1] == "tmpfs"
			}
		}
	}
	return false
}

// A ConfigMap edited in the API server reaches the running pod's volume
// at once, all keys together: the node watches the objects its pods read,
// where the kubelet waits for the pod's next periodic sync (a minute by
// default, which the wait below stays well under). The projected token is
// bound to the pod and carries the audience asked for.
func TestConfigMapUpdateReachesTheRunningPod(t *testing.T) {
	t.Parallel()
	e := setupWith(t, clustertest.Options{})
	cs := e.srv.Admin
	cm, err := cs.CoreV1().ConfigMaps("default").Create(e.ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "live"}, Data: map[string]string{"a": "1", "b": "1"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := e.pod("reader", "sh", "-c", "while true; do echo \"a=$(cat /etc/live/a) b=$(cat /etc/live/b)\"; sleep 0.2; done")
	p.Spec.Volumes = []v1.Volume{
		{Name: "live", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "live"}}}},
		{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600), Path: "token"}},
		}}}},
	}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "live", MountPath: "/etc/live"}, {Name: "token", MountPath: "/etc/token"}}
	created := e.create(p)
	e.waitPod("reader Running", p.Name, runningReady)
	logsHave := func(want string, within time.Duration) {
		t.Helper()
		harness.EventuallyWithin(t, within, "the pod's log shows "+want, func() (bool, string) {
			raw, err := cs.CoreV1().Pods("default").GetLogs(p.Name, &v1.PodLogOptions{TailLines: ptr.To[int64](3)}).DoRaw(e.ctx)
			return err == nil && strings.Contains(string(raw), want), fmt.Sprint(string(raw), err)
		})
	}
	logsHave("a=1 b=1", harness.Deadline)
	cm.Data = map[string]string{"a": "2", "b": "2"}
	if _, err := cs.CoreV1().ConfigMaps("default").Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	logsHave("a=2 b=2", 20*time.Second)

	// The token as the API server sees it: the pod's service account,
	// bound to the pod, for audience vault.
	tokenFile := filepath.Join(e.a.RootDir, "pods", string(created.UID), "volumes", "kubernetes.io~projected", "token", "token")
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().TokenReviews().Create(e.ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: string(tok), Audiences: []string{"vault"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:default:default" ||
		fmt.Sprint(st.User.Extra["authentication.kubernetes.io/pod-name"]) != "[reader]" {
		t.Errorf("token review: %+v", st)
	}
}
