package kuberuntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// VolumePaths says where a pod's volume is on the host.
type VolumePaths interface {
	Path(pod *v1.Pod, vol *v1.Volume) (string, error)
}

// noVolumes is VolumePaths without a pods directory.
type noVolumes struct{}

func (noVolumes) Path(_ *v1.Pod, vol *v1.Volume) (string, error) {
	if vol.HostPath != nil {
		return vol.HostPath.Path, nil
	}
	return "", fmt.Errorf("volume %q: no pods directory configured: %w", vol.Name, errdefs.ErrInvalidArgument)
}

// makeMounts turns the container's volumeMounts into CRI mounts: each
// volume's host path, or a subPath inside it (created when missing);
// subPathExpr is expanded with the container's environment vars first. A
// mount is read-only when it says so or its claim volume does.
func (m *Manager) makeMounts(pod *v1.Pod, c *v1.Container, vars map[string]string) ([]*runtimeapi.Mount, error) {
	var mounts []*runtimeapi.Mount
	for _, vm := range c.VolumeMounts {
		var vol *v1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, fmt.Errorf("volumeMount %q of container %q names no volume of the pod: %w", vm.Name, c.Name, errdefs.ErrInvalidArgument)
		}
		host, err := m.cfg.Volumes.Path(pod, vol)
		if err != nil {
			return nil, err
		}
		sub, field := vm.SubPath, "subPath"
		if vm.SubPathExpr != "" {
			sub, field = expand(vm.SubPathExpr, vars), "subPathExpr"
		}
		if sub != "" {
			if filepath.IsAbs(sub) || hasDotDot(sub) {
				return nil, fmt.Errorf("volumeMount %q of container %q: %s %q must be a relative path inside the volume: %w", vm.Name, c.Name, field, sub, errdefs.ErrInvalidArgument)
			}
			full := filepath.Join(host, sub)
			if err := makeSubPath(host, sub); err != nil {
				return nil, fmt.Errorf("volumeMount %q of container %q: %s %q: %w", vm.Name, c.Name, field, sub, err)
			}
			host = full
		}
		mounts = append(mounts, &runtimeapi.Mount{
			ContainerPath: vm.MountPath,
			HostPath:      host,
			Readonly:      vm.ReadOnly || claimReadOnly(vol),
			Propagation:   propagation(vm.MountPropagation),
		})
	}
	return mounts, nil
}

// makeSubPath creates the missing directories of sub inside the volume
// at root as the kubelet does: with the volume root's mode, special bits
// too (the setgid of a volume owned by the pod's fsGroup, the sticky bit
// of a tmpfs), which mkdir alone would lose to the umask; the group is
// the root's by its setgid bit.
func makeSubPath(root, sub string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	mode := fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
	cur := root
	for _, el := range strings.Split(filepath.Clean(sub), "/") {
		cur = filepath.Join(cur, el)
		if _, err := os.Lstat(cur); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Mkdir(cur, mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(cur, mode); err != nil {
			return err
		}
	}
	return nil
}

// claimReadOnly reports a persistentVolumeClaim volume the pod asks to
// mount read-only in every container.
func claimReadOnly(vol *v1.Volume) bool {
	return vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ReadOnly
}

func propagation(p *v1.MountPropagationMode) runtimeapi.MountPropagation {
	if p == nil {
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	}
	switch *p {
	case v1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	case v1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	}
	return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
}

// hasDotDot reports a ".." element in a slash-separated path.
func hasDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}
