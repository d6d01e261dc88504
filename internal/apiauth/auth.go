// Package apiauth decides who may call the kubelet API and what they may
// do there, the way the kubelet does, with the API server's own libraries
// (k8s.io/apiserver's delegating authenticator and authorizer):
//
//   - authentication: client certificates signed by --client-ca-file,
//     bearer tokens checked by the API server (TokenReview, answers cached
//     for authentication.webhook.cacheTTL), anonymous requests only when
//     authentication.anonymous.enabled; otherwise 401 Unauthorized;
//   - authorization: authorization.mode AlwaysAllow, or Webhook, which asks
//     the API server (SubjectAccessReview) whether the user may use the
//     node's subresource for the request's path (nodes/proxy, nodes/log,
//     nodes/stats, nodes/metrics, nodes/pods, nodes/healthz,
//     nodes/configz) with the verb of its HTTP method; otherwise 403.
//
// One identity is minilet's own: the local admin, whose client certificate
// is signed by a CA only this agent knows (see package pki). It is allowed
// everything, so the CLI works on a standalone machine and beside a
// cluster's authorization alike.
package apiauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Authorization modes (authorization.mode).
const (
	ModeAlwaysAllow = "AlwaysAllow"
	ModeWebhook     = "Webhook"
)

// Config is the kubelet's authentication and authorization configuration.
type Config struct {
	// NodeName is the node whose subresources requests are checked against.
	NodeName string
	// ClientCAFile is authentication.x509.clientCAFile; "" = no client
	// certificates but the local admin's. The file is re-read when it changes.
	ClientCAFile string
	// Anonymous is authentication.anonymous.enabled (default false).
	Anonymous bool
	// Webhook is authentication.webhook.enabled: bearer tokens checked by
	// TokenReview. Needs Clients.Tokens.
	Webhook bool
	// WebhookCacheTTL is authentication.webhook.cacheTTL (default 2m).
	WebhookCacheTTL time.Duration
	// Mode is authorization.mode: ModeAlwaysAllow or ModeWebhook (which
	// needs Clients.Access).
	Mode string
	// AuthorizedTTL and UnauthorizedTTL are authorization.webhook's
	// cacheAuthorizedTTL (default 5m) and cacheUnauthorizedTTL (default 30s).
	AuthorizedTTL, UnauthorizedTTL time.Duration
	// LocalCA is the PEM certificate of the local admin's CA; nil = no
	// local admin.
	LocalCA []byte
	// Logger receives authentication and authorization failures.
	Logger *slog.Logger
}

// Clients reach the API server for TokenReview and SubjectAccessReview;
// nil in standalone mode.
type Clients struct {
	Tokens authenticationv1.AuthenticationV1Interface
	Access authorizationv1.AuthorizationV1Interface
}

// webhookBackoff is the API server libraries' default retry of a review.
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Auth authenticates and authorizes requests. Build it with New; Run keeps
// the client CA file current.
type Auth struct {
	nodeName  string
	authn     authenticator.Request
	authz     authorizer.UnconditionalAuthorizer
	caFile    *dynamiccertificates.DynamicFileCAContent
	anonymous bool
	log       *slog.Logger
}

// New builds an Auth from cfg. Webhook authentication or authorization
// without the matching client is an error naming the field.
func New(cfg Config, c Clients) (*Auth, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Auth{nodeName: cfg.NodeName, anonymous: cfg.Anonymous, log: cfg.Logger}

	var authns []authenticator.Request
	if len(cfg.LocalCA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.LocalCA) {
			return nil, errors.New("local admin CA: no PEM certificate")
		}
		authns = append(authns, x509request.New(x509.VerifyOptions{
			Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, x509request.UserConversionFunc(localAdminUser)))
	}
	delegating := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous: &apiserverapi.AnonymousAuthConfig{Enabled: cfg.Anonymous},
		CacheTTL:  cfg.WebhookCacheTTL,
	}
	if cfg.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("authentication.x509.clientCAFile (--client-ca-file) %s: %w", cfg.ClientCAFile, err)
		}
		a.caFile = ca
		delegating.ClientCertificateCAContentProvider = ca
	}
	if cfg.Webhook {
		if c.Tokens == nil {
			return nil, errors.New("authentication.webhook.enabled (--authentication-token-webhook) needs an API server (--kubeconfig)")
		}
		backoff := webhookBackoff
		delegating.WebhookRetryBackoff = &backoff
		delegating.TokenAccessReviewClient = c.Tokens
	}
	if delegating.ClientCertificateCAContentProvider != nil || delegating.TokenAccessReviewClient != nil || cfg.Anonymous {
		d, _, err := delegating.New()
		if err != nil {
			return nil, fmt.Errorf("authentication: %w", err)
		}
		authns = append(authns, d)
	}
	// The first authenticator that knows the request wins; with none, every
	// request is unauthenticated.
	a.authn = union.New(authns...)

	switch cfg.Mode {
	case ModeAlwaysAllow:
		a.authz = authorizerfactory.NewAlwaysAllowAuthorizer()
	case ModeWebhook:
		if c.Access == nil {
			return nil, errors.New("authorization.mode Webhook (--authorization-mode) needs an API server (--kubeconfig)")
		}
		backoff := webhookBackoff
		z, err := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: c.Access,
			AllowCacheTTL:             cfg.AuthorizedTTL,
			DenyCacheTTL:              cfg.UnauthorizedTTL,
			WebhookRetryBackoff:       &backoff,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("authorization: %w", err)
		}
		a.authz = z
	default:
		return nil, fmt.Errorf("authorization.mode (--authorization-mode) %q: want %s or %s", cfg.Mode, ModeAlwaysAllow, ModeWebhook)
	}
	return a, nil
}

// Run re-reads the client CA file when it changes, until ctx ends.
func (a *Auth) Run(ctx context.Context) {
	if a.caFile != nil {
		a.caFile.Run(ctx, 1)
	}
}

// Wrap puts authentication and authorization in front of next, with the
// kubelet's answers: 401 "Unauthorized", 403 "Forbidden (user=...)".
func (a *Auth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				a.log.Debug("kubelet API: request not authenticated", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		u := resp.User
		if _, local := u.(localAdmin); local {
			next.ServeHTTP(w, r)
			return
		}
		attrs := Attributes(a.nodeName, u, r)
		subresources := make([]string, 0, len(attrs))
		for _, attr := range attrs {
			subresources = append(subresources, attr.GetSubresource())
			decision, _, err := a.authz.Authorize(r.Context(), attr)
			if err != nil {
				a.log.Warn("kubelet API: authorization failed", "user", u.GetName(), "verb", attr.GetVerb(), "subresource", attr.GetSubresource(), "err", err)
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					u.GetName(), attr.GetVerb(), attr.GetResource(), attr.GetSubresource()), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		a.log.Debug("kubelet API: forbidden", "user", u.GetName(), "verb", attrs[0].GetVerb(), "subresources", subresources)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)",
			u.GetName(), attrs[0].GetVerb(), attrs[0].GetResource(), subresources), http.StatusForbidden)
	})
}

// Attributes are what a request to the kubelet API asks of node nodeName:
// a verb from the HTTP method and the node subresources its path maps to,
// in the order they are tried. Every path not named below is nodes/proxy;
// /pods, /runningpods, /healthz and /configz also accept nodes/proxy.
func Attributes(nodeName string, u user.Info, r *http.Request) []authorizer.Attributes {
	var subresources []string
	p := r.URL.Path
	switch {
	case under(p, "/pods"), under(p, "/runningpods"):
		subresources = append(subresources, "pods")
	case under(p, "/healthz"):
		subresources = append(subresources, "healthz")
	case under(p, "/configz"):
		subresources = append(subresources, "configz")
	}
	switch {
	case under(p, "/stats"):
		subresources = append(subresources, "stats")
	case under(p, "/metrics"):
		subresources = append(subresources, "metrics")
	case under(p, "/logs"):
		subresources = append(subresources, "log")
	case under(p, "/checkpoint"):
		subresources = append(subresources, "checkpoint")
	default:
		subresources = append(subresources, "proxy")
	}
	attrs := make([]authorizer.Attributes, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User:            u,
			Verb:            verbOf(r.Method),
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            nodeName,
			ResourceRequest: true,
			Path:            p,
		})
	}
	return attrs
}

// verbOf maps an HTTP method to the API verb the kubelet checks.
func verbOf(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// under tells whether path is prefix or below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// localAdmin is the user of a client certificate from the local CA; its
// Go type, which no other authenticator returns, is what grants it
// everything.
type localAdmin struct{ *user.DefaultInfo }

func localAdminUser(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
	if len(chain) == 0 || chain[0].Subject.CommonName == "" {
		return nil, false, errors.New("local client certificate without a common name")
	}
	return &authenticator.Response{User: localAdmin{&user.DefaultInfo{
		Name:   chain[0].Subject.CommonName,
		Groups: []string{user.AllAuthenticated},
	}}}, true, nil
}
