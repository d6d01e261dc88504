package apiauth

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/minilet/minilet/internal/pki"
)

// denyAll stands in for a SubjectAccessReview that says no (the real
// review is exercised against kube-apiserver in the cluster tests); it
// records what it was asked.
type denyAll struct{ asked []authorizer.Attributes }

func (d *denyAll) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d.asked = append(d.asked, a)
	return authorizer.DecisionNoOpinion, "", nil
}

// twoCAs makes the agent's local CA (dir local) and another CA standing for
// the cluster's (dir cluster, used as --client-ca-file), each with a client
// certificate whose user is minilet:local-admin.
func twoCAs(t *testing.T) (localCA []byte, local, cluster string) {
	t.Helper()
	local, cluster = filepath.Join(t.TempDir(), "local"), filepath.Join(t.TempDir(), "cluster")
	localCA, err := pki.EnsureLocalAdmin(local)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureLocalAdmin(cluster); err != nil {
		t.Fatal(err)
	}
	return localCA, local, cluster
}

// serve runs handler behind a over TLS asking for client certificates.
func serve(t *testing.T, a *Auth) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	ts.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// get calls path with the client certificate in dir ("" = none).
func get(t *testing.T, ts *httptest.Server, dir, path string) (int, string) {
	t.Helper()
	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test server
	if dir != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.ClientCertFile), filepath.Join(dir, pki.ClientKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := c.Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestWhoGetsIn(t *testing.T) {
	localCA, local, cluster := twoCAs(t)
	stranger := filepath.Join(t.TempDir(), "stranger")
	if _, err := pki.EnsureLocalAdmin(stranger); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{
		NodeName: "n1", Mode: ModeAlwaysAllow, LocalCA: localCA,
		ClientCAFile: filepath.Join(cluster, pki.LocalCAFile),
	}, Clients{})
	if err != nil {
		t.Fatal(err)
	}
	deny := &denyAll{}
	a.authz = deny
	ts := serve(t, a)

	if code, body := get(t, ts, local, "/containerLogs/ns/p/c"); code != 200 {
		t.Errorf("local admin: %d %q, want 200 whatever the authorizer says", code, body)
	}
	// Same user name, but signed by the cluster's CA: an ordinary user,
	// who must pass authorization.
	code, body := get(t, ts, cluster, "/pods")
	if code != http.StatusForbidden || body != "Forbidden (user=minilet:local-admin, verb=get, resource=nodes, subresource(s)=[pods proxy])" {
		t.Errorf("cluster-signed user denied by the authorizer: %d %q", code, body)
	}
	if len(deny.asked) != 2 || deny.asked[0].GetName() != "n1" || deny.asked[0].GetSubresource() != "pods" || deny.asked[1].GetSubresource() != "proxy" {
		t.Errorf("authorizer asked %v, want nodes/pods then nodes/proxy of n1", deny.asked)
	}
	for _, tc := range []struct{ name, dir string }{{"no credentials", ""}, {"unknown CA", stranger}} {
		if code, body := get(t, ts, tc.dir, "/pods"); code != http.StatusUnauthorized || body != "Unauthorized" {
			t.Errorf("%s: %d %q, want 401 Unauthorized", tc.name, code, body)
		}
	}
}

func TestAnonymousGoesThroughAuthorization(t *testing.T) {
	a, err := New(Config{NodeName: "n1", Mode: ModeAlwaysAllow, Anonymous: true}, Clients{})
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, a)
	if code, _ := get(t, ts, "", "/healthz"); code != 200 {
		t.Errorf("anonymous with AlwaysAllow: %d, want 200", code)
	}
	deny := &denyAll{}
	a.authz = deny
	if code, body := get(t, ts, "", "/stats/summary"); code != http.StatusForbidden || !strings.Contains(body, "user=system:anonymous") {
		t.Errorf("anonymous denied: %d %q", code, body)
	}
}

func TestCertificatesOfTheClientCAFileAreReadFromDisk(t *testing.T) {
	_, _, cluster := twoCAs(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if _, err := New(Config{Mode: ModeAlwaysAllow, ClientCAFile: caFile}, Clients{}); err == nil || !strings.Contains(err.Error(), "clientCAFile") {
		t.Errorf("missing --client-ca-file: err %v, want one naming the field", err)
	}
	b, _ := os.ReadFile(filepath.Join(cluster, pki.LocalCAFile))
	if err := os.WriteFile(caFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Mode: ModeAlwaysAllow, ClientCAFile: caFile}, Clients{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, serve(t, a), cluster, "/pods"); code != 200 {
		t.Errorf("user of the client CA with AlwaysAllow: %d, want 200", code)
	}
}

func TestWebhooksNeedAnAPIServer(t *testing.T) {
	for _, cfg := range []Config{
		{Mode: ModeAlwaysAllow, Webhook: true},
		{Mode: ModeWebhook},
		{Mode: "RBAC"},
	} {
		_, err := New(cfg, Clients{})
		if err == nil || !strings.Contains(err.Error(), "authentication.webhook") && !strings.Contains(err.Error(), "authorization.mode") {
			t.Errorf("New(%+v) = %v, want an error naming the field", cfg, err)
		}
	}
}

func TestAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "alice"}
	for _, tc := range []struct {
		method, path string
		verb         string
		subresources []string
	}{
		{"GET", "/containerLogs/ns/pod/ctr", "get", []string{"proxy"}},
		{"POST", "/exec/ns/pod/ctr", "create", []string{"proxy"}},
		{"GET", "/exec/ns/pod/ctr", "get", []string{"proxy"}},
		{"POST", "/portForward/ns/pod", "create", []string{"proxy"}},
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/podsfoo", "get", []string{"proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"PUT", "/x", "update", []string{"proxy"}},
		{"DELETE", "/x", "delete", []string{"proxy"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		attrs := Attributes("node-1", u, r)
		var subs []string
		for _, a := range attrs {
			subs = append(subs, a.GetSubresource())
			if a.GetVerb() != tc.verb || a.GetResource() != "nodes" || a.GetName() != "node-1" || a.GetAPIVersion() != "v1" || !a.IsResourceRequest() {
				t.Errorf("%s %s: attributes %+v", tc.method, tc.path, a)
			}
		}
		if !reflect.DeepEqual(subs, tc.subresources) {
			t.Errorf("%s %s: subresources %v, want %v", tc.method, tc.path, subs, tc.subresources)
		}
	}
}
