package imagereg

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// The credentials of the private repository (privateRegistry), the same
// pair agnhost's fake-registry-server --private accepts.
const (
	privateUser     = "user"
	privatePassword = "password"
)

// guard wraps the registry with the two repositories whose semantics the
// specs rely on: nothing is ever found under /invalid, and
// /k8s-authenticated-test needs basic auth.
func guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case underRepo(r.URL.Path, invalidPath):
			registryError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository name not known to registry (invalidRegistry never serves an image)")
			return
		case underRepo(r.URL.Path, privatePath) && !authorized(r):
			w.Header().Set("WWW-Authenticate", `Basic realm="minilet imagereg private repository"`)
			registryError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// underRepo reports whether a registry API path is about a repository
// under prefix (/v2/PREFIX/...).
func underRepo(urlPath, prefix string) bool {
	return strings.HasPrefix(urlPath, "/v2/"+prefix+"/")
}

func authorized(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	return ok &&
		subtle.ConstantTimeCompare([]byte(user), []byte(privateUser)) == 1 &&
		subtle.ConstantTimeCompare([]byte(pass), []byte(privatePassword)) == 1
}

// registryError answers with the distribution API's error body.
func registryError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"errors":[{"code":"` + code + `","message":"` + msg + `"}]}` + "\n"))
}
