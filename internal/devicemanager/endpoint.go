package devicemanager

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is the connection to one registered plugin for one resource.
// Its goroutine streams ListAndWatch into the manager. A newer
// registration for the same resource replaces it; a replaced endpoint's
// late messages are ignored.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn // nil for a placeholder restored from the checkpoint
	client   pluginapi.DevicePluginClient
	cancel   context.CancelFunc
	done     chan struct{}

	// guarded by Manager.mu
	opts      *pluginapi.DevicePluginOptions
	stoppedAt time.Time // zero while the stream is up
	listed    bool      // a ListAndWatch message arrived
}

// newStoppedEndpoint stands in for a resource known from the checkpoint
// until its plugin registers again: it counts as stopped from now on, so
// the grace period applies.
func newStoppedEndpoint(resourceName string, now time.Time) *endpoint {
	done := make(chan struct{})
	close(done)
	return &endpoint{resource: resourceName, done: done, cancel: func() {}, stoppedAt: now}
}

func dialEndpoint(resourceName, socket string, regOpts *pluginapi.DevicePluginOptions) (*endpoint, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial device plugin %s at %s: %w", resourceName, socket, err)
	}
	return &endpoint{
		resource: resourceName,
		socket:   socket,
		conn:     conn,
		client:   pluginapi.NewDevicePluginClient(conn),
		done:     make(chan struct{}),
		opts:     regOpts,
	}, nil
}

// graceExpired reports whether the plugin has been gone for longer than
// grace. Caller holds Manager.mu.
func (e *endpoint) graceExpired(now time.Time, grace time.Duration) bool {
	return !e.stoppedAt.IsZero() && now.Sub(e.stoppedAt) > grace
}

// running reports whether the plugin is connected. Caller holds Manager.mu.
func (e *endpoint) running() bool { return e.client != nil && e.stoppedAt.IsZero() }

// stop ends the stream and waits for the goroutine. Idempotent.
func (e *endpoint) stop() {
	if e.cancel != nil {
		e.cancel()
	}
	<-e.done
	if e.conn != nil {
		_ = e.conn.Close()
	}
}

// run fetches the plugin's options, then applies every ListAndWatch
// message until the stream ends. Owned by Manager.wg.
func (m *Manager) runEndpoint(ctx context.Context, e *endpoint) {
	defer m.wg.Done()
	defer close(e.done)
	log := m.log.With("resource", e.resource, "socket", e.socket)

	octx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
	opts, err := e.client.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		log.Warn("GetDevicePluginOptions failed; using the options sent at registration", "err", err)
	} else {
		m.mu.Lock()
		e.opts = opts
		m.mu.Unlock()
	}

	stream, err := e.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		log.Warn("ListAndWatch failed", "err", err)
		m.endpointGone(e)
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("ListAndWatch stream ended; marking devices unhealthy", "err", err)
			}
			m.endpointGone(e)
			return
		}
		m.updateDevices(e, resp.GetDevices())
	}
}

// updateDevices replaces the resource's device list with one
// ListAndWatch message. The first message is not final: plugins may send
// an empty list first and the real one right after.
func (m *Manager) updateDevices(e *endpoint, devs []*pluginapi.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.endpoints[e.resource] != e {
		return // replaced by a newer registration
	}
	if !e.listed {
		e.listed = true
		close(m.listed)
		m.listed = make(chan struct{})
	}
	old := m.devices[e.resource]
	m.updates++
	if sameIDs(old, devs, m.updates) {
		// Only health or topology changed (the common, frequent case):
		// update in place, nothing to persist.
		for _, d := range devs {
			dv := old[d.GetID()]
			dv.healthy, dv.topology = d.GetHealth() == pluginapi.Healthy, d.GetTopology()
		}
		return
	}
	next := make(map[string]*device, len(devs))
	for _, d := range devs {
		if d != nil && d.GetID() != "" {
			next[d.GetID()] = &device{healthy: d.GetHealth() == pluginapi.Healthy, topology: d.GetTopology()}
		}
	}
	m.devices[e.resource] = next
	m.sortedIDs[e.resource] = sortedKeys(next)
	m.log.Debug("device list changed", "resource", e.resource, "devices", len(next))
	m.saveLocked()
}

// endpointGone marks every device of the resource unhealthy and starts the
// grace period, unless e was already replaced.
func (m *Manager) endpointGone(e *endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.endpoints[e.resource] != e {
		return
	}
	e.stoppedAt = m.clock.Now()
	for _, d := range m.devices[e.resource] {
		d.healthy = false
	}
}

// allocate calls the plugin's Allocate for one container.
func (m *Manager) callAllocate(ctx context.Context, e *endpoint, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
	defer cancel()
	resp, err := e.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return nil, err
	}
	if n := len(resp.GetContainerResponses()); n != 1 {
		return nil, fmt.Errorf("plugin answered Allocate with %d container responses, want 1", n)
	}
	r := resp.GetContainerResponses()[0]
	if r == nil {
		r = &pluginapi.ContainerAllocateResponse{}
	}
	return r, nil
}

// callPreferred asks the plugin which of available it prefers.
func (m *Manager) callPreferred(ctx context.Context, e *endpoint, available, mustInclude []string, size int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
	defer cancel()
	resp, err := e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	if n := len(resp.GetContainerResponses()); n != 1 {
		return nil, fmt.Errorf("plugin answered GetPreferredAllocation with %d container responses, want 1", n)
	}
	return resp.GetContainerResponses()[0].GetDeviceIDs(), nil
}

// sameIDs reports whether devs lists exactly the IDs of have, each once
// (and no nil or empty entries). stamp must differ from every earlier call
// for the same map; it marks the devices seen without allocating.
func sameIDs(have map[string]*device, devs []*pluginapi.Device, stamp uint64) bool {
	if len(have) != len(devs) {
		return false
	}
	for _, d := range devs {
		if d == nil {
			return false
		}
		dv, ok := have[d.GetID()]
		if !ok || dv.mark == stamp {
			return false // unknown, or listed twice
		}
		dv.mark = stamp
	}
	return true
}
