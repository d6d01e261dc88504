// Package volumes makes a pod's volumes exist on the node, as the
// kubelet's volume manager does, under <pods-dir>/<pod-uid>/volumes/
// <plugin>/<name>:
//
//   - emptyDir (kubernetes.io~empty-dir): a directory open to every user
//     (0777; with the pod's fsGroup, owned by that group and setgid so
//     files made inside inherit it), or with medium Memory a tmpfs sized
//     by sizeLimit. A disk emptyDir's sizeLimit is enforced by eviction,
//     which measures it with EmptyDirUsage;
//   - configMap, secret, downwardAPI and projected (kubernetes.io~configmap,
//     ~secret, ~downward-api, ~projected): files written with the kubelet's
//     atomic ..data layout, rewritten when their sources change; secret
//     and projected volumes live on a tmpfs, never on disk. A projected
//     serviceAccountToken is a TokenRequest bound to the pod, renewed at
//     80 % of its lifetime (or after a day);
//   - hostPath: the host's own path, created or checked by its type;
//   - persistentVolumeClaim: the path of the local or hostPath
//     PersistentVolume bound to the claim, when its nodeAffinity allows
//     this node. Setup resolves it through the API server and remembers
//     it for Path.
//
// Setup runs at every sync of the pod, so changes reach running pods
// within the sync period; Teardown removes what Setup made once the pod is
// gone. ConfigMaps, Secrets, tokens and claims come from an Objects
// source: the API server in cluster mode.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/downward"
	"github.com/minilet/minilet/internal/errdefs"
)

// Plugin directory names, as the kubelet spells them.
const (
	EmptyDirPlugin = "kubernetes.io~empty-dir"
	ConfigMapDir   = "kubernetes.io~configmap"
	SecretDir      = "kubernetes.io~secret"
	DownwardDir    = "kubernetes.io~downward-api"
	ProjectedDir   = "kubernetes.io~projected"
)

// Objects is where configMaps, secrets, service-account tokens and
// persistent volume claims (with their volumes) come from. A missing
// object is an error wrapping errdefs.ErrNotFound.
type Objects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// ServiceAccountToken requests a token for the pod's service account,
	// bound to the pod.
	ServiceAccountToken(ctx context.Context, pod *v1.Pod, spec authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequestStatus, error)
	PersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	PersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
}

// Config configures a Manager.
type Config struct {
	// PodsDir holds each pod's directory. Required.
	PodsDir string
	// Objects serves configMaps, secrets and tokens; nil = none (a
	// standalone agent): volumes needing them fail, naming why.
	Objects Objects
	// Node answers the downward API's node questions (host IP,
	// allocatable).
	Node downward.Node
	// NodeName is this node's name, which persistent volumes' node
	// affinity must allow.
	NodeName string
	// NodeLabels are the node's labels for node affinity; nil = the
	// well-known ones the agent sets (hostname = NodeName, os, arch).
	NodeLabels func() map[string]string
	// Clock decides token renewal; default the real clock.
	Clock clock.Clock
	// Logger default: slog.Default().
	Logger *slog.Logger
}

// Manager sets up and tears down pod volumes. Safe for concurrent use by
// different pods' workers.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	tokens map[tokenKey]*issued
	claims map[claimKey]string // persistentVolumeClaim volumes → host paths
}

type tokenKey struct {
	pod      types.UID
	account  string
	audience string
	seconds  int64
}

type issued struct {
	token     string
	issuedAt  time.Time
	expiresAt time.Time
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.PodsDir == "" {
		return nil, errors.New("volumes: a pods directory is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{cfg: cfg, log: cfg.Logger.With("component", "volumes"), tokens: map[tokenKey]*issued{}, claims: map[claimKey]string{}}, nil
}

// errNoObjects explains configMap, secret and token failures standalone.
var errNoObjects = fmt.Errorf("this node has no API server to read it from: %w", errdefs.ErrNotFound)

func (m *Manager) volumesDir(uid types.UID) string {
	return filepath.Join(m.cfg.PodsDir, string(uid), "volumes")
}

// Path is where volume vol of pod is on the host: its directory under the
// pod's, a hostPath's own path, or the path Setup resolved for a
// persistentVolumeClaim.
func (m *Manager) Path(pod *v1.Pod, vol *v1.Volume) (string, error) {
	dir := ""
	switch {
	case vol.HostPath != nil:
		return vol.HostPath.Path, nil
	case vol.PersistentVolumeClaim != nil:
		if p, ok := m.claimed(pod.UID, vol.Name); ok {
			return p, nil
		}
		return "", fmt.Errorf("volume %q: persistentVolumeClaim %q is not set up yet: %w", vol.Name, vol.PersistentVolumeClaim.ClaimName, errdefs.ErrUnavailable)
	case vol.EmptyDir != nil:
		dir = EmptyDirPlugin
	case vol.ConfigMap != nil:
		dir = ConfigMapDir
	case vol.Secret != nil:
		dir = SecretDir
	case vol.DownwardAPI != nil:
		dir = DownwardDir
	case vol.Projected != nil:
		dir = ProjectedDir
	default:
		return "", fmt.Errorf("volume %q: %s volumes are not supported on this node: %w", vol.Name, kind(vol), errdefs.ErrInvalidArgument)
	}
	return filepath.Join(m.volumesDir(pod.UID), dir, vol.Name), nil
}

// kind names a volume's source for messages.
func kind(vol *v1.Volume) string {
	switch {
	case vol.NFS != nil:
		return "nfs"
	case vol.ISCSI != nil:
		return "iscsi"
	case vol.CSI != nil:
		return "csi"
	case vol.Ephemeral != nil:
		return "ephemeral"
	case vol.Image != nil:
		return "image"
	}
	return "this kind of"
}

// Setup makes every volume of pod ready (creating, refreshing content)
// and returns the first failure, naming the volume, after trying all.
func (m *Manager) Setup(ctx context.Context, pod *v1.Pod) error {
	var errs []error
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if err := m.setup(ctx, pod, vol); err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", vol.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) setup(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	if vol.PersistentVolumeClaim != nil {
		path, err := m.claimPath(ctx, pod, vol.PersistentVolumeClaim)
		if err != nil {
			return err
		}
		m.rememberClaim(pod.UID, vol.Name, path)
		return nil
	}
	dir, err := m.Path(pod, vol)
	if err != nil {
		return err
	}
	switch {
	case vol.HostPath != nil:
		return prepareHostPath(vol.HostPath.Path, vol.HostPath.Type)
	case vol.EmptyDir != nil:
		return m.emptyDir(pod, vol.EmptyDir, dir)
	}
	payload, err := m.payload(ctx, pod, vol)
	if err != nil {
		return err
	}
	if vol.Secret != nil || vol.Projected != nil {
		if err := ensureTmpfs(dir, ""); err != nil {
			return fmt.Errorf("tmpfs for its files: %w", err)
		}
	}
	gid := -1
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		gid = int(*sc.FSGroup)
	}
	changed, err := writeAtomic(dir, payload, gid)
	if err != nil {
		return fmt.Errorf("writing its files: %w", err)
	}
	if changed {
		m.log.Debug("volume content written", "pod", pod.Namespace+"/"+pod.Name, "volume", vol.Name, "files", len(payload))
	}
	return nil
}

// emptyDir makes the directory, open to every user as the kubelet's is;
// medium Memory mounts a tmpfs there, sized by sizeLimit, else by the
// pod's memory limit when every container has one, its root 1777 as a
// tmpfs's is. With the pod's fsGroup the directory belongs to that group
// and is setgid (02777, 03777 on tmpfs), so what containers create inside
// belongs to the group too.
func (m *Manager) emptyDir(pod *v1.Pod, ed *v1.EmptyDirVolumeSource, dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if ed.Medium == v1.StorageMediumMemory {
		size := ""
		if q := memorySize(pod, ed.SizeLimit); q > 0 {
			size = "size=" + strconv.FormatInt(q, 10)
		}
		if err := ensureTmpfs(dir, size); err != nil {
			return fmt.Errorf("medium Memory: %w", err)
		}
	}
	perm := os.FileMode(0o777)
	if ed.Medium == v1.StorageMediumMemory {
		perm |= os.ModeSticky // a tmpfs's root, as the kubelet's is: 1777
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		if err := os.Lchown(dir, -1, int(*sc.FSGroup)); err != nil {
			return fmt.Errorf("fsGroup %d: %w", *sc.FSGroup, err)
		}
		perm |= os.ModeSetgid
	}
	return os.Chmod(dir, perm)
}

// memorySize is a Memory emptyDir's tmpfs size: sizeLimit, else the sum of
// the containers' memory limits when all have one; 0 = tmpfs's default.
func memorySize(pod *v1.Pod, limit *resource.Quantity) int64 {
	if limit != nil && limit.Value() > 0 {
		return limit.Value()
	}
	var sum int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return 0
		}
		sum += q.Value()
	}
	return sum
}

// ensureTmpfs mounts a tmpfs on dir unless one is there already.
func ensureTmpfs(dir, opts string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	data := "mode=0755"
	if opts != "" {
		data += "," + opts
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is on another device than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// CleanupOrphans tears down the volumes of every pod under the pods
// directory that is not in keep: pods deleted while the agent was down
// leave their tmpfs mounts and files behind otherwise.
func (m *Manager) CleanupOrphans(keep map[types.UID]bool) error {
	entries, err := os.ReadDir(m.cfg.PodsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || keep[uid] {
			continue
		}
		if _, err := os.Stat(m.volumesDir(uid)); err != nil {
			continue
		}
		m.log.Info("removing the volumes of a pod that is gone", "uid", uid)
		if err := m.Teardown(uid); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", uid, err))
		}
	}
	return errors.Join(errs...)
}

// Teardown unmounts the tmpfs mounts of pod uid's volumes and removes its
// volume directories; hostPath and persistent volume contents are never
// touched.
func (m *Manager) Teardown(uid types.UID) error {
	m.mu.Lock()
	for k := range m.tokens {
		if k.pod == uid {
			delete(m.tokens, k)
		}
	}
	for k := range m.claims {
		if k.pod == uid {
			delete(m.claims, k)
		}
	}
	m.mu.Unlock()
	root := m.volumesDir(uid)
	plugins, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range plugins {
		vols, err := os.ReadDir(filepath.Join(root, p.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, v := range vols {
			dir := filepath.Join(root, p.Name(), v.Name())
			if mounted, _ := isMountPoint(dir); mounted {
				if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
					errs = append(errs, fmt.Errorf("unmount %s: %w", dir, err))
					continue
				}
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Nothing is mounted below root any more: removing cannot reach
	// outside the pod's directory.
	return os.RemoveAll(root)
}
