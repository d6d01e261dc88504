package config

import (
	"crypto/tls"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The kubelet API's defaults differ by mode: a standalone agent listens on
// loopback, keeps the read-only port and, with no API server to ask,
// authorizes whoever authenticates; in cluster mode the kubelet's own
// defaults hold.
func TestServerDefaultsByMode(t *testing.T) {
	type server struct {
		Address      string
		Port, RO     int
		Webhook      bool
		Mode         string
		Anonymous    bool
		TTLs         [3]time.Duration
		TLSMin       uint16
		ClientCAFile string
	}
	get := func(c *Config) server {
		return server{c.Address.String(), c.Port, c.ReadOnlyPort, c.WebhookAuthn, c.AuthorizationMode, c.AnonymousAuth,
			[3]time.Duration{c.WebhookAuthnCacheTTL, c.AuthorizedTTL, c.UnauthorizedTTL}, c.TLSMinVersion, c.ClientCAFile}
	}
	ttls := [3]time.Duration{2 * time.Minute, 5 * time.Minute, 30 * time.Second}
	if got, want := get(mustLoad(t, "")), (server{"127.0.0.1", 10250, 10255, false, "AlwaysAllow", false, ttls, tls.VersionTLS12, ""}); got != want {
		t.Errorf("standalone:\n got %+v\nwant %+v", got, want)
	}
	if got, want := get(mustLoad(t, "", "--kubeconfig=/k")), (server{"0.0.0.0", 10250, 0, true, "Webhook", false, ttls, tls.VersionTLS12, ""}); got != want {
		t.Errorf("cluster:\n got %+v\nwant %+v", got, want)
	}
	file := header + `port: 11250
readOnlyPort: 0
tlsMinVersion: VersionTLS13
authentication:
  x509: {clientCAFile: /ca.crt}
  anonymous: {enabled: true}
  webhook: {enabled: false, cacheTTL: 1m}
authorization:
  mode: AlwaysAllow
  webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 1s}
`
	want := server{"0.0.0.0", 11250, 0, false, "AlwaysAllow", true, [3]time.Duration{time.Minute, time.Minute, time.Second}, tls.VersionTLS13, "/ca.crt"}
	if got := get(mustLoad(t, file, "--kubeconfig=/k")); got != want {
		t.Errorf("file in cluster mode:\n got %+v\nwant %+v", got, want)
	}
	want = server{"0.0.0.0", 0, 0, true, "Webhook", false, [3]time.Duration{time.Minute, time.Minute, time.Second}, tls.VersionTLS13, "/ca2.crt"}
	if got := get(mustLoad(t, file, "--kubeconfig=/k", "--port=0", "--client-ca-file=/ca2.crt", "--anonymous-auth=false",
		"--authentication-token-webhook", "--authorization-mode=Webhook")); got != want {
		t.Errorf("flags over the file:\n got %+v\nwant %+v", got, want)
	}
}

func TestServerSettingsInvalid(t *testing.T) {
	for _, tc := range []struct {
		file  string
		args  []string
		field string
	}{
		{"", []string{"--authorization-mode=RBAC"}, "authorization.mode"},
		{"", []string{"--tls-cert-file=/c.crt"}, "tlsPrivateKeyFile"},
		{header + "tlsMinVersion: VersionTLS10\n", nil, "tlsMinVersion"},
		{header + "port: 70000\n", nil, "port"},
	} {
		_, err := load(t, tc.file, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q %v: err %v, want one naming %s", tc.file, tc.args, err, tc.field)
		}
	}
}

// A field the file sets and minilet does not act on is listed, so the
// agent can warn about it instead of ignoring it in silence.
func TestIgnoredFields(t *testing.T) {
	c := mustLoad(t, header+"maxPods: 20\ncpuCFSQuota: false\nclusterDNS: [10.0.0.10]\nfeatureGates: {Foo: true}\n")
	if want := []string{"clusterDNS", "cpuCFSQuota", "featureGates"}; !reflect.DeepEqual(c.Ignored, want) {
		t.Errorf("Ignored = %v, want %v", c.Ignored, want)
	}
	if c := mustLoad(t, header+"maxPods: 20\n"); len(c.Ignored) != 0 {
		t.Errorf("Ignored = %v for honoured fields only", c.Ignored)
	}
}

func TestSystemLogHandler(t *testing.T) {
	if !mustLoad(t, "").SystemLogHandler {
		t.Error("the system log handler is off by default; the kubelet's is on")
	}
	if mustLoad(t, header+"enableSystemLogHandler: false\n").SystemLogHandler {
		t.Error("enableSystemLogHandler: false left it on")
	}
	if mustLoad(t, header+"enableDebuggingHandlers: false\n").SystemLogHandler {
		t.Error("enableDebuggingHandlers: false left it on")
	}
}

// TLS bootstrapping settings: --cert-dir defaults to <root-dir>/pki,
// rotateCertificates and serverTLSBootstrap come from the file (the former
// also from its flag), and a bootstrap kubeconfig needs --kubeconfig to
// write to. nodeStatusMaxImages defaults to the kubelet's 50.
func TestCertificateSettings(t *testing.T) {
	c := mustLoad(t, "", "--root-dir=/r", "--kubeconfig=/k", "--bootstrap-kubeconfig=/b")
	if c.CertDir != "/r/pki" || c.BootstrapKubeconfig != "/b" || c.RotateCertificates || c.ServerTLSBootstrap || c.NodeStatusMaxImages != 50 {
		t.Errorf("defaults: certDir %q bootstrap %q rotate %v serverTLSBootstrap %v maxImages %d", c.CertDir, c.BootstrapKubeconfig, c.RotateCertificates, c.ServerTLSBootstrap, c.NodeStatusMaxImages)
	}
	file := header + "rotateCertificates: true\nserverTLSBootstrap: true\nnodeStatusMaxImages: -1\n"
	c = mustLoad(t, file, "--kubeconfig=/k", "--cert-dir=/certs")
	if c.CertDir != "/certs" || !c.RotateCertificates || !c.ServerTLSBootstrap || c.NodeStatusMaxImages != -1 || len(c.Ignored) != 0 {
		t.Errorf("from the file: certDir %q rotate %v serverTLSBootstrap %v maxImages %d ignored %v", c.CertDir, c.RotateCertificates, c.ServerTLSBootstrap, c.NodeStatusMaxImages, c.Ignored)
	}
	if c = mustLoad(t, file, "--kubeconfig=/k", "--rotate-certificates=false"); c.RotateCertificates {
		t.Error("--rotate-certificates=false did not override the file")
	}
	for _, tc := range []struct {
		file string
		args []string
		want string
	}{
		{"", []string{"--bootstrap-kubeconfig=/b"}, "--kubeconfig"},
		{"", []string{"--kubeconfig=/k", "--cert-dir=certs"}, "--cert-dir"},
		{header + "nodeStatusMaxImages: -2\n", nil, "nodeStatusMaxImages"},
	} {
		if _, err := load(t, tc.file, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: error %v, want one naming %s", tc.args, tc.file, err, tc.want)
		}
	}
}
