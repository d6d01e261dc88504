package devicemanager

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// allocation is what one container holds of one resource, with the
// plugin's answer to Allocate (envs, mounts, devices, annotations).
type allocation struct {
	ids  sets.Set[string]
	resp *pluginapi.ContainerAllocateResponse
	raw  []byte // resp in protobuf, as the checkpoint stores it
}

// podDevices records allocations: pod UID → container name → resource.
// Guarded by Manager.mu.
type podDevices map[types.UID]map[string]map[string]*allocation

func (p podDevices) get(pod types.UID, container, resourceName string) *allocation {
	return p[pod][container][resourceName]
}

func (p podDevices) set(pod types.UID, container, resourceName string, a *allocation) {
	if p[pod] == nil {
		p[pod] = map[string]map[string]*allocation{}
	}
	if p[pod][container] == nil {
		p[pod][container] = map[string]*allocation{}
	}
	p[pod][container][resourceName] = a
}

func (p podDevices) remove(pod types.UID, container, resourceName string) {
	delete(p[pod][container], resourceName)
	if len(p[pod][container]) == 0 {
		delete(p[pod], container)
	}
	if len(p[pod]) == 0 {
		delete(p, pod)
	}
}

// containerDevices is everything one container holds, by resource.
func (p podDevices) containerDevices(pod types.UID, container string) map[string]*allocation {
	return p[pod][container]
}

// inUse is every allocated device ID by resource.
func (p podDevices) inUse() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, containers := range p {
		for _, resources := range containers {
			for name, a := range resources {
				if out[name] == nil {
					out[name] = sets.New[string]()
				}
				out[name] = out[name].Union(a.ids)
			}
		}
	}
	return out
}

type owner struct {
	pod       types.UID
	container string
}

// owners maps resource → device ID → a holder (the container name that
// sorts first when several containers of a pod reuse a device).
func (p podDevices) owners() map[string]map[string]owner {
	out := map[string]map[string]owner{}
	for uid, containers := range p {
		for _, cname := range sortedKeys(containers) {
			for name, a := range containers[cname] {
				if out[name] == nil {
					out[name] = map[string]owner{}
				}
				for id := range a.ids {
					if _, taken := out[name][id]; !taken {
						out[name][id] = owner{pod: uid, container: cname}
					}
				}
			}
		}
	}
	return out
}
