package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/downward"
	"github.com/minilet/minilet/internal/errdefs"
)

// defaultMode is the kubelet's file mode for volume files (0644).
const defaultMode = 0o644

func mode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & os.ModePerm
}

// payload is the files of a configMap, secret, downwardAPI or projected
// volume.
func (m *Manager) payload(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (map[string]File, error) {
	out := map[string]File{}
	var err error
	switch {
	case vol.ConfigMap != nil:
		s := vol.ConfigMap
		err = m.configMapFiles(ctx, pod, s.Name, s.Items, s.Optional, mode(s.DefaultMode, defaultMode), out)
	case vol.Secret != nil:
		s := vol.Secret
		err = m.secretFiles(ctx, pod, s.SecretName, s.Items, s.Optional, mode(s.DefaultMode, defaultMode), out)
	case vol.DownwardAPI != nil:
		err = m.downwardFiles(pod, vol.DownwardAPI.Items, mode(vol.DownwardAPI.DefaultMode, defaultMode), out)
	case vol.Projected != nil:
		err = m.projectedFiles(ctx, pod, vol.Projected, out)
	}
	return out, err
}

func (m *Manager) projectedFiles(ctx context.Context, pod *v1.Pod, p *v1.ProjectedVolumeSource, out map[string]File) error {
	def := mode(p.DefaultMode, defaultMode)
	for i, src := range p.Sources {
		var err error
		switch {
		case src.ConfigMap != nil:
			s := src.ConfigMap
			err = m.configMapFiles(ctx, pod, s.Name, s.Items, s.Optional, def, out)
		case src.Secret != nil:
			s := src.Secret
			err = m.secretFiles(ctx, pod, s.Name, s.Items, s.Optional, def, out)
		case src.DownwardAPI != nil:
			err = m.downwardFiles(pod, src.DownwardAPI.Items, def, out)
		case src.ServiceAccountToken != nil:
			err = m.tokenFile(ctx, pod, src.ServiceAccountToken, def, out)
		default:
			err = fmt.Errorf("this kind of source is not supported on this node: %w", errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return fmt.Errorf("projected.sources[%d]: %w", i, err)
		}
	}
	return nil
}

// keyFiles puts data's keys (all, or items) into out under their paths.
func keyFiles(what string, data map[string][]byte, items []v1.KeyToPath, optional bool, def os.FileMode, out map[string]File) error {
	if len(items) == 0 {
		for k, v := range data {
			out[k] = File{Data: v, Mode: def}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s has no key %q: %w", what, it.Key, errdefs.ErrNotFound)
		}
		if err := validPath(it.Path); err != nil {
			return fmt.Errorf("item %q: %w: %w", it.Key, err, errdefs.ErrInvalidArgument)
		}
		out[it.Path] = File{Data: v, Mode: mode(it.Mode, def)}
	}
	return nil
}

func (m *Manager) configMapFiles(ctx context.Context, pod *v1.Pod, name string, items []v1.KeyToPath, optional *bool, def os.FileMode, out map[string]File) error {
	what := fmt.Sprintf("configmap %q", name)
	if m.cfg.Objects == nil {
		if ptr.Deref(optional, false) {
			return nil
		}
		return fmt.Errorf("%s: %w", what, errNoObjects)
	}
	cm, err := m.cfg.Objects.ConfigMap(ctx, pod.Namespace, name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) && ptr.Deref(optional, false) {
			return nil
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(what, data, items, ptr.Deref(optional, false), def, out)
}

func (m *Manager) secretFiles(ctx context.Context, pod *v1.Pod, name string, items []v1.KeyToPath, optional *bool, def os.FileMode, out map[string]File) error {
	what := fmt.Sprintf("secret %q", name)
	if m.cfg.Objects == nil {
		if ptr.Deref(optional, false) {
			return nil
		}
		return fmt.Errorf("%s: %w", what, errNoObjects)
	}
	s, err := m.cfg.Objects.Secret(ctx, pod.Namespace, name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) && ptr.Deref(optional, false) {
			return nil
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return keyFiles(what, s.Data, items, ptr.Deref(optional, false), def, out)
}

func (m *Manager) downwardFiles(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, def os.FileMode, out map[string]File) error {
	for _, it := range items {
		if err := validPath(it.Path); err != nil {
			return fmt.Errorf("item %q: %w: %w", it.Path, err, errdefs.ErrInvalidArgument)
		}
		var (
			v   string
			err error
		)
		switch {
		case it.FieldRef != nil:
			v, err = downward.Field(pod, it.FieldRef.FieldPath, m.cfg.Node, podIP(pod))
		case it.ResourceFieldRef != nil:
			v, err = downward.Resource(pod, nil, it.ResourceFieldRef, m.cfg.Node)
		default:
			err = fmt.Errorf("item %q names no field: %w", it.Path, errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
		}
		out[it.Path] = File{Data: []byte(v), Mode: mode(it.Mode, def)}
	}
	return nil
}

func podIP(pod *v1.Pod) string { return pod.Status.PodIP }

// tokenFile puts the pod's service-account token at its path, requesting
// a new one when none is cached or the cached one is due for renewal.
func (m *Manager) tokenFile(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, def os.FileMode, out map[string]File) error {
	if err := validPath(src.Path); err != nil {
		return fmt.Errorf("serviceAccountToken path: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if m.cfg.Objects == nil {
		return fmt.Errorf("service account token: %w", errNoObjects)
	}
	seconds := ptr.Deref(src.ExpirationSeconds, 3600)
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	key := tokenKey{pod: pod.UID, account: sa, audience: src.Audience, seconds: seconds}
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	cached := m.tokens[key]
	m.mu.Unlock()
	if cached == nil || renewDue(cached, now) {
		spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(seconds)}
		if src.Audience != "" {
			spec.Audiences = []string{src.Audience}
		}
		st, err := m.cfg.Objects.ServiceAccountToken(ctx, pod, spec)
		if err != nil {
			if cached != nil && now.Before(cached.expiresAt) {
				// Keep serving the valid token; try again next sync.
				m.log.Warn("service account token not renewed; the current one stays until it expires",
					"pod", pod.Namespace+"/"+pod.Name, "serviceAccount", sa, "expires", cached.expiresAt, "err", err)
			} else {
				return fmt.Errorf("service account %q token: %w", sa, err)
			}
		} else {
			cached = &issued{token: st.Token, issuedAt: now, expiresAt: st.ExpirationTimestamp.Time}
			m.mu.Lock()
			m.tokens[key] = cached
			m.mu.Unlock()
		}
	}
	out[src.Path] = File{Data: []byte(cached.token), Mode: def}
	return nil
}

// renewDue is the kubelet's rule: renew past 80 % of the token's
// lifetime, or when it is older than a day.
func renewDue(t *issued, now time.Time) bool {
	life := t.expiresAt.Sub(t.issuedAt)
	return now.After(t.issuedAt.Add(life*8/10)) || now.Sub(t.issuedAt) > 24*time.Hour
}

// prepareHostPath applies a hostPath volume's type: create what *OrCreate
// asks for, check what the other types promise.
func prepareHostPath(path string, t *v1.HostPathType) error {
	if t == nil || *t == v1.HostPathUnset {
		return nil
	}
	switch *t {
	case v1.HostPathDirectoryOrCreate:
		return os.MkdirAll(path, 0o755)
	case v1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("hostPath type check failed: %w", err)
	}
	ok := true
	switch *t {
	case v1.HostPathDirectory:
		ok = fi.IsDir()
	case v1.HostPathFile:
		ok = fi.Mode().IsRegular()
	case v1.HostPathSocket:
		ok = fi.Mode()&os.ModeSocket != 0
	case v1.HostPathCharDev:
		ok = fi.Mode()&os.ModeCharDevice != 0
	case v1.HostPathBlockDev:
		ok = fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
	}
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not a %s: %w", path, *t, errdefs.ErrInvalidArgument)
	}
	return nil
}
