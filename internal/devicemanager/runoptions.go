package devicemanager

import (
	"context"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
)

// RunOptions returns what the plugins' Allocate answers add to a
// container: environment, mounts, device nodes, annotations and CDI
// devices (in CRI's CDIDevices field, as the kubelet sends them). Duplicates across resources keep the
// first mount or device per container path; a conflicting env value is
// logged and the later resource (in name order) wins, like the kubelet.
// A container that asks for device plugin resources but holds none is an
// ErrNotFound: it must not start without its devices. RunOptions first
// waits until the allocations are in the checkpoint on disk, then calls
// PreStartContainer on the plugins that require it.
func (m *Manager) RunOptions(pod *v1.Pod, c *v1.Container) (*container.RunOptions, error) {
	if pod == nil || c == nil {
		return nil, fmt.Errorf("device manager: run options: pod and container are required: %w", errdefs.ErrInvalidArgument)
	}
	// The container must not run with devices the checkpoint lacks.
	if err := m.ckpt.persisted(m.cfg.RPCTimeout); err != nil {
		return nil, fmt.Errorf("device manager: run options for %s/%s container %q: %w", pod.Namespace, pod.Name, c.Name, err)
	}
	// Plugins that asked for it (PreStartRequired) prepare the devices
	// now, as the kubelet calls PreStartContainer while it builds the
	// container's options: a failure fails the container's creation.
	if err := m.PreStart(context.Background(), pod, c.Name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.podDevs.containerDevices(pod.UID, c.Name)
	if len(held) > 0 {
		m.mayRun.Insert(pod.UID) // a container is about to use them
	}
	for _, name := range deviceRequests(c) {
		if _, isDevicePlugin := m.devices[name]; isDevicePlugin && held[name] == nil {
			return nil, fmt.Errorf("device manager: %s/%s container %q asks for %s but holds no devices (not admitted?): %w",
				pod.Namespace, pod.Name, c.Name, name, errdefs.ErrNotFound)
		}
	}
	opts := &container.RunOptions{}
	envs := map[string]string{}
	mounts := map[string]bool{}
	devs := map[string]bool{}
	cdi := map[string]bool{}
	for _, name := range sortedKeys(held) {
		resp := held[name].resp
		if resp == nil {
			continue
		}
		for k, v := range resp.GetEnvs() {
			if old, ok := envs[k]; ok && old != v {
				m.log.Warn("device plugins set an environment variable differently", "pod", pod.UID,
					"container", c.Name, "env", k, "resource", name)
			}
			envs[k] = v
		}
		for _, mt := range resp.GetMounts() {
			if mt == nil || mounts[mt.GetContainerPath()] {
				continue
			}
			mounts[mt.GetContainerPath()] = true
			opts.Mounts = append(opts.Mounts, &runtimeapi.Mount{
				ContainerPath: mt.GetContainerPath(),
				HostPath:      mt.GetHostPath(),
				Readonly:      mt.GetReadOnly(),
			})
		}
		for _, d := range resp.GetDevices() {
			if d == nil || devs[d.GetContainerPath()] {
				continue
			}
			devs[d.GetContainerPath()] = true
			opts.Devices = append(opts.Devices, &runtimeapi.Device{
				ContainerPath: d.GetContainerPath(),
				HostPath:      d.GetHostPath(),
				Permissions:   d.GetPermissions(),
			})
		}
		if len(resp.GetAnnotations()) > 0 && opts.Annotations == nil {
			opts.Annotations = map[string]string{}
		}
		for k, v := range resp.GetAnnotations() {
			opts.Annotations[k] = v
		}
		for _, d := range resp.GetCdiDevices() {
			if d.GetName() == "" || cdi[d.GetName()] {
				continue
			}
			cdi[d.GetName()] = true
			opts.CDIDevices = append(opts.CDIDevices, &runtimeapi.CDIDevice{Name: d.GetName()})
		}
	}
	for _, k := range sortedKeys(envs) {
		opts.Envs = append(opts.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(envs[k])})
	}
	sort.Slice(opts.Mounts, func(i, j int) bool { return opts.Mounts[i].ContainerPath < opts.Mounts[j].ContainerPath })
	sort.Slice(opts.Devices, func(i, j int) bool { return opts.Devices[i].ContainerPath < opts.Devices[j].ContainerPath })
	return opts, nil
}
