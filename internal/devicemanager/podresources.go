package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/minilet/minilet/internal/podspec"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResourcesServer serves the pod-resources API v1 (the kubelet's
// <root-dir>/pod-resources/kubelet.sock), used by monitoring agents such
// as GPU exporters to learn which container holds which device.
type podResourcesServer struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	m    *Manager
	path string
	srv  *grpc.Server
	wg   sync.WaitGroup
	once sync.Once
}

func startPodResourcesServer(m *Manager, path string) (*podResourcesServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("device manager: pod-resources dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("device manager: remove stale %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("device manager: pod-resources listen on %s: %w", path, err)
	}
	s := &podResourcesServer{m: m, path: path, srv: grpc.NewServer()}
	podresourcesapi.RegisterPodResourcesListerServer(s.srv, s)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(lis); err != nil {
			m.log.Error("pod-resources server stopped", "err", err)
		}
	}()
	return s, nil
}

// stop is idempotent and waits for the server.
func (s *podResourcesServer) stop() {
	s.once.Do(func() {
		s.srv.Stop()
		s.wg.Wait()
		_ = os.Remove(s.path)
	})
}

// List reports every active pod with the devices of its containers.
func (s *podResourcesServer) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for _, p := range s.m.pods.ActivePods() {
		if p != nil {
			resp.PodResources = append(resp.PodResources, s.m.podResources(p))
		}
	}
	return resp, nil
}

// Get reports one active pod.
func (s *podResourcesServer) Get(_ context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	for _, p := range s.m.pods.ActivePods() {
		if p != nil && p.Name == req.GetPodName() && p.Namespace == req.GetPodNamespace() {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: s.m.podResources(p)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

// GetAllocatableResources reports every healthy device, one entry per
// device (and NUMA node, when the plugin reports topology).
func (s *podResourcesServer) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	resp := &podresourcesapi.AllocatableResourcesResponse{}
	for _, name := range sortedKeys(m.devices) {
		devs := m.devices[name]
		for _, id := range sortedKeys(devs) {
			d := devs[id]
			if !d.healthy {
				continue
			}
			nodes := d.topology.GetNodes()
			if len(nodes) == 0 {
				resp.Devices = append(resp.Devices, &podresourcesapi.ContainerDevices{ResourceName: name, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				resp.Devices = append(resp.Devices, &podresourcesapi.ContainerDevices{
					ResourceName: name, DeviceIds: []string{id},
					Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: n.GetID()}}},
				})
			}
		}
	}
	return resp, nil
}

// podResources is one pod's view: sidecar init containers and app
// containers, each with its devices grouped by resource and NUMA node.
func (m *Manager) podResources(p *v1.Pod) *podresourcesapi.PodResources {
	out := &podresourcesapi.PodResources{Name: p.Name, Namespace: p.Namespace}
	var names []string
	for _, c := range p.Spec.InitContainers {
		if podspec.IsSidecar(&c) {
			names = append(names, c.Name)
		}
	}
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cname := range names {
		cr := &podresourcesapi.ContainerResources{Name: cname}
		held := m.podDevs.containerDevices(p.UID, cname)
		for _, name := range sortedKeys(held) {
			cr.Devices = append(cr.Devices, m.groupByNUMA(name, held[name].ids)...)
		}
		out.Containers = append(out.Containers, cr)
	}
	return out
}

// groupByNUMA splits ids by the first NUMA node each device reports;
// devices without topology form one group without topology.
func (m *Manager) groupByNUMA(resourceName string, ids sets.Set[string]) []*podresourcesapi.ContainerDevices {
	const noNode = int64(-1)
	groups := map[int64][]string{}
	for _, id := range sets.List(ids) {
		node := noNode
		if d := m.devices[resourceName][id]; d != nil && len(d.topology.GetNodes()) > 0 {
			node = d.topology.GetNodes()[0].GetID()
		}
		groups[node] = append(groups[node], id)
	}
	keys := make([]int64, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	out := make([]*podresourcesapi.ContainerDevices, 0, len(keys))
	for _, k := range keys {
		cd := &podresourcesapi.ContainerDevices{ResourceName: resourceName, DeviceIds: groups[k]}
		if k != noNode {
			cd.Topology = &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: k}}}
		}
		out = append(out, cd)
	}
	return out
}
