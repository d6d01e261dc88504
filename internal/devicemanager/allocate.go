package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// ReasonUnexpectedAdmissionError is the pod status reason (and Warning
// event reason) for a pod whose devices could not be allocated.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// AdmissionError is returned by Allocate when a pod cannot get its
// devices. The agent marks the pod Failed with Reason() and Error() as the
// message, and records a Warning event with the same words. It unwraps
// to the cause, which is classified (errdefs.ErrResourceExhausted when
// too few devices are free, ErrUnavailable when the plugin is not there
// or failed, ErrInvalidArgument for a changed request).
type AdmissionError struct {
	Pod       types.UID
	Container string
	Resource  string
	Err       error
}

// Error reads like the kubelet's admission message.
func (e *AdmissionError) Error() string {
	var o *outOfResource
	if errors.As(e.Err, &o) {
		return o.Error()
	}
	return "Allocate failed due to " + e.Err.Error() + ", which is unexpected"
}

// Unwrap returns the classified cause.
func (e *AdmissionError) Unwrap() error { return e.Err }

// Reason is the pod status reason for this failure: OutOf<resource> for
// a resource the node does not have at all (as the kubelet's resource
// fit says for it), UnexpectedAdmissionError otherwise.
func (e *AdmissionError) Reason() string {
	var o *outOfResource
	if errors.As(e.Err, &o) {
		return "OutOf" + o.resource
	}
	return ReasonUnexpectedAdmissionError
}

// outOfResource is a request for a resource no device plugin serves (and
// none did in this run or the last): the node has none of it.
type outOfResource struct {
	resource  string
	requested int
}

func (o *outOfResource) Error() string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: 0, capacity: 0", o.resource, o.requested)
}

func (o *outOfResource) Unwrap() error { return errdefs.ErrResourceExhausted }

// classified is an error whose message is exactly msg and which is its class.
type classified struct {
	msg   string
	class error
}

func (c *classified) Error() string { return c.msg }
func (c *classified) Unwrap() error { return c.class }

func errorf(class error, format string, args ...any) error {
	return &classified{msg: fmt.Sprintf(format, args...), class: class}
}

// Allocate gives the pod's containers the devices they ask for (in
// resources.limits): init containers first, whose devices later
// containers may reuse, then app containers. For each container and
// resource the order is: what the container holds already (a restart),
// devices of finished init containers, the plugin's preferred allocation
// when it offers one, then free healthy devices in ID order. The plugin's
// Allocate is called per container and its answer kept for RunOptions.
// On failure nothing newly allocated for the pod is kept and the error is
// an *AdmissionError.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod) error {
	if pod == nil {
		return fmt.Errorf("device manager: allocate: pod is nil: %w", errdefs.ErrInvalidArgument)
	}
	if m.cfg.PluginWait > 0 {
		m.waitForPlugins(ctx, pod)
	}
	m.allocMu.Lock()
	defer m.allocMu.Unlock()

	reusable := map[string]sets.Set[string]{} // resource → devices of init containers
	type key struct{ container, resource string }
	var added []key
	fail := func(c *v1.Container, resourceName string, err error) error {
		m.mu.Lock()
		for _, k := range added {
			m.podDevs.remove(pod.UID, k.container, k.resource)
		}
		if len(added) > 0 {
			m.allocated = m.podDevs.inUse()
			m.saveLocked()
		}
		m.mu.Unlock()
		return &AdmissionError{Pod: pod.UID, Container: c.Name, Resource: resourceName, Err: err}
	}
	allocateContainer := func(c *v1.Container) error {
		for _, name := range deviceRequests(c) {
			q := c.Resources.Limits[v1.ResourceName(name)]
			want := int(q.Value())
			isNew, err := m.allocateOne(ctx, pod.UID, c.Name, name, want, reusable[name])
			if err != nil {
				return fail(c, name, err)
			}
			if isNew {
				added = append(added, key{c.Name, name})
			}
		}
		return nil
	}

	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if err := allocateContainer(c); err != nil {
			return err
		}
		sidecar := podspec.IsSidecar(c)
		m.mu.Lock()
		for name, a := range m.podDevs.containerDevices(pod.UID, c.Name) {
			if reusable[name] == nil {
				reusable[name] = sets.New[string]()
			}
			if sidecar {
				// A sidecar keeps running: its devices are not free for others.
				reusable[name] = reusable[name].Difference(a.ids)
			} else {
				reusable[name] = reusable[name].Union(a.ids)
			}
		}
		m.mu.Unlock()
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if err := allocateContainer(c); err != nil {
			return err
		}
		m.mu.Lock()
		for name, a := range m.podDevs.containerDevices(pod.UID, c.Name) {
			if reusable[name] != nil {
				reusable[name] = reusable[name].Difference(a.ids)
			}
		}
		m.mu.Unlock()
	}
	if len(added) > 0 {
		m.mu.Lock()
		m.saveLocked()
		m.mu.Unlock()
	}
	return nil
}

// deviceRequests lists the extended resources a container asks for, sorted.
func deviceRequests(c *v1.Container) []string {
	var out []string
	for name, q := range c.Resources.Limits {
		if isExtendedResourceName(string(name)) && q.Value() > 0 {
			out = append(out, string(name))
		}
	}
	sort.Strings(out)
	return out
}

// allocateOne makes sure one container holds want devices of one
// resource. isNew is false when it held them already.
func (m *Manager) allocateOne(ctx context.Context, pod types.UID, container, resourceName string, want int, reusable sets.Set[string]) (isNew bool, err error) {
	m.mu.Lock()
	if a := m.podDevs.get(pod, container, resourceName); a != nil {
		m.mu.Unlock()
		if a.ids.Len() != want {
			return false, errorf(errdefs.ErrInvalidArgument, "pod %s container %q changed its request for %s from %d to %d",
				pod, container, resourceName, a.ids.Len(), want)
		}
		return false, nil
	}
	e := m.endpoints[resourceName]
	if e == nil {
		m.mu.Unlock()
		return false, &outOfResource{resource: resourceName, requested: want}
	}
	if !e.running() {
		m.mu.Unlock()
		return false, errorf(errdefs.ErrUnavailable, "no healthy devices present; cannot allocate unhealthy devices %s", resourceName)
	}
	chosen := sets.New[string]()
	take := func(from []string) bool {
		for _, id := range from {
			if chosen.Len() == want {
				break
			}
			chosen.Insert(id)
		}
		return chosen.Len() == want
	}
	if take(sets.List(reusable)) {
		m.mu.Unlock()
		return m.finishAllocation(ctx, e, pod, container, resourceName, chosen)
	}
	needed := want - chosen.Len()
	preferredOffered := e.opts.GetGetPreferredAllocationAvailable()
	limit := needed // enough to decide; everything when the plugin gets to choose
	if preferredOffered {
		limit = -1
	}
	available := m.freeDevices(resourceName, chosen, limit)
	if len(available) < needed {
		n := len(m.freeDevices(resourceName, chosen, -1))
		m.mu.Unlock()
		return false, errorf(errdefs.ErrResourceExhausted, "requested number of devices unavailable for %s. Requested: %d, Available: %d",
			resourceName, needed, n)
	}
	if !preferredOffered || len(available) == needed {
		take(available)
		m.mu.Unlock()
		return m.finishAllocation(ctx, e, pod, container, resourceName, chosen)
	}
	m.mu.Unlock()

	// Ask outside the lock: ListAndWatch updates keep flowing meanwhile.
	preferred, err := m.callPreferred(ctx, e, sets.List(chosen.Clone().Insert(available...)), sets.List(chosen), want)
	if err != nil {
		m.log.Warn("GetPreferredAllocation failed; picking devices in ID order",
			"resource", resourceName, "pod", pod, "container", container, "err", err)
	}
	m.mu.Lock()
	// Devices may have turned unhealthy while we asked.
	available = m.freeDevices(resourceName, chosen, -1)
	free := sets.New(available...)
	var fromPreferred []string
	for _, id := range preferred {
		if free.Has(id) {
			fromPreferred = append(fromPreferred, id)
		}
	}
	ok := take(fromPreferred) || take(available)
	m.mu.Unlock()
	if !ok {
		return false, errorf(errdefs.ErrResourceExhausted, "requested number of devices unavailable for %s. Requested: %d, Available: %d",
			resourceName, needed, len(available))
	}
	return m.finishAllocation(ctx, e, pod, container, resourceName, chosen)
}

// freeDevices lists healthy devices that no pod holds and that are not
// in exclude, in ID order, stopping after limit (limit < 0: all).
// Caller holds m.mu.
func (m *Manager) freeDevices(resourceName string, exclude sets.Set[string], limit int) []string {
	var out []string
	devs, inUse := m.devices[resourceName], m.allocated[resourceName]
	for _, id := range m.sortedIDs[resourceName] {
		if limit >= 0 && len(out) >= limit {
			break
		}
		if d := devs[id]; d != nil && d.healthy && !inUse.Has(id) && !exclude.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

// finishAllocation calls the plugin's Allocate and records the answer.
func (m *Manager) finishAllocation(ctx context.Context, e *endpoint, pod types.UID, container, resourceName string, ids sets.Set[string]) (bool, error) {
	resp, err := m.callAllocate(ctx, e, sets.List(ids))
	if err != nil {
		return false, errorf(errdefs.ErrUnavailable, "device plugin %s failed to allocate %v: %v", resourceName, sets.List(ids), err)
	}
	raw, err := proto.Marshal(resp)
	if err != nil {
		return false, errorf(errdefs.ErrUnavailable, "device plugin %s answered Allocate with a response that cannot be stored: %v", resourceName, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.podDevs.set(pod, container, resourceName, &allocation{ids: ids, resp: resp, raw: raw})
	if m.allocated[resourceName] == nil {
		m.allocated[resourceName] = sets.New[string]()
	}
	m.allocated[resourceName].Insert(ids.UnsortedList()...)
	m.log.Debug("devices allocated", "resource", resourceName, "pod", pod, "container", container, "devices", sets.List(ids))
	return true, nil
}

// PreStart calls PreStartContainer on every plugin that asked for it, with
// the devices the container holds. Call it right before the container
// starts.
func (m *Manager) PreStart(ctx context.Context, pod *v1.Pod, containerName string) error {
	if pod == nil {
		return fmt.Errorf("device manager: pre-start: pod is nil: %w", errdefs.ErrInvalidArgument)
	}
	type call struct {
		e   *endpoint
		ids []string
	}
	var calls []call
	m.mu.Lock()
	held := m.podDevs.containerDevices(pod.UID, containerName)
	for _, name := range sortedKeys(held) {
		e := m.endpoints[name]
		if e == nil || !e.opts.GetPreStartRequired() {
			continue
		}
		if !e.running() {
			m.mu.Unlock()
			return fmt.Errorf("device manager: pre-start of %s/%s container %q: device plugin for %s is not running: %w",
				pod.Namespace, pod.Name, containerName, name, errdefs.ErrUnavailable)
		}
		calls = append(calls, call{e, sets.List(held[name].ids)})
	}
	m.mu.Unlock()
	for _, c := range calls {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		_, err := c.e.client.PreStartContainer(cctx, &pluginapi.PreStartContainerRequest{DevicesIds: c.ids})
		cancel()
		if err != nil {
			// The kubelet's words, with the resource and container named.
			return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %v (%s for %s/%s container %q): %w",
				err, c.e.resource, pod.Namespace, pod.Name, containerName, errdefs.ErrUnavailable)
		}
	}
	return nil
}
