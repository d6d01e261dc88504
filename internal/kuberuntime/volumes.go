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

// unsupportedVolumes names the pod's volumes minilet cannot provide
// (anything but emptyDir and hostPath: there is no API server or volume
// plugin to back them).
func unsupportedVolumes(pod *v1.Pod) []string {
	var bad []string
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil && v.HostPath == nil {
			bad = append(bad, v.Name)
		}
	}
	return bad
}

func (m *Manager) emptyDirPath(pod *v1.Pod, name string) string {
	return filepath.Join(m.cfg.PodsDir, string(pod.UID), "volumes", "kubernetes.io~empty-dir", name)
}

// makeMounts turns the container's volumeMounts into CRI mounts, creating
// emptyDir directories (and DirectoryOrCreate/FileOrCreate host paths).
func (m *Manager) makeMounts(pod *v1.Pod, c *v1.Container) ([]*runtimeapi.Mount, error) {
	if bad := unsupportedVolumes(pod); len(bad) > 0 {
		return nil, fmt.Errorf("volumes are not supported: %s: %w", strings.Join(bad, ", "), errdefs.ErrInvalidArgument)
	}
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
		var host string
		switch {
		case vol.EmptyDir != nil:
			if m.cfg.PodsDir == "" {
				return nil, fmt.Errorf("emptyDir volume %q: no pods directory configured: %w", vol.Name, errdefs.ErrInvalidArgument)
			}
			host = m.emptyDirPath(pod, vol.Name)
			if err := os.MkdirAll(host, 0o777); err != nil {
				return nil, fmt.Errorf("emptyDir volume %q: %w", vol.Name, err)
			}
		default:
			host = vol.HostPath.Path
			if err := prepareHostPath(host, vol.HostPath.Type); err != nil {
				return nil, fmt.Errorf("hostPath volume %q: %w", vol.Name, err)
			}
		}
		if vm.SubPath != "" {
			if filepath.IsAbs(vm.SubPath) || strings.Contains(vm.SubPath, "..") {
				return nil, fmt.Errorf("volumeMount %q: subPath %q must be a relative path inside the volume: %w", vm.Name, vm.SubPath, errdefs.ErrInvalidArgument)
			}
			host = filepath.Join(host, vm.SubPath)
			if _, err := os.Stat(host); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(host, 0o755); err != nil {
					return nil, fmt.Errorf("volumeMount %q subPath: %w", vm.Name, err)
				}
			}
		}
		mounts = append(mounts, &runtimeapi.Mount{
			ContainerPath: vm.MountPath,
			HostPath:      host,
			Readonly:      vm.ReadOnly,
			Propagation:   propagation(vm.MountPropagation),
		})
	}
	return mounts, nil
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

// prepareHostPath applies the hostPath type: create what *OrCreate asks
// for, check what the other types promise.
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
