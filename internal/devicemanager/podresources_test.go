package devicemanager

import (
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type podList struct {
	mu   sync.Mutex
	pods []*v1.Pod
}

func (l *podList) ActivePods() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*v1.Pod(nil), l.pods...)
}

func TestPodResourcesAPI(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "pod-resources", "kubelet.sock")
	pods := &podList{}
	env := startManager(t, filepath.Join(dir, "dp"), Config{PodResourcesSocket: sock}, pods)
	p := newTestPlugin(t, env.dir, "p.sock", testResource)
	p.serve(t)
	p.register(t, env.dir)
	numa := func(id int64) *pluginapi.TopologyInfo {
		return &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: id}}}
	}
	p.setDevices(
		&pluginapi.Device{ID: "d0", Health: pluginapi.Healthy, Topology: numa(0)},
		&pluginapi.Device{ID: "d1", Health: pluginapi.Healthy, Topology: numa(1)},
		&pluginapi.Device{ID: "d2", Health: pluginapi.Unhealthy},
	)
	env.waitCounts(t, testResource, 3, 2)

	pod := podWith("uid1", ctr{"a", 2}, ctr{"b", 0})
	if err := env.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pods.mu.Lock()
	pods.pods = []*v1.Pod{pod}
	pods.mu.Unlock()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	list, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.PodResources) != 1 {
		t.Fatalf("List = %v", list)
	}
	pr := list.PodResources[0]
	if pr.Name != "pod-uid1" || pr.Namespace != "default" || len(pr.Containers) != 2 {
		t.Fatalf("pod resources = %v", pr)
	}
	type group struct {
		ids  []string
		node int64
	}
	var got []group
	for _, d := range pr.Containers[0].Devices {
		if d.ResourceName != testResource {
			t.Fatalf("resource %q", d.ResourceName)
		}
		got = append(got, group{d.DeviceIds, d.Topology.GetNodes()[0].GetID()})
	}
	if want := []group{{[]string{"d0"}, 0}, {[]string{"d1"}, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("container a devices = %+v, want %+v", got, want)
	}
	if pr.Containers[1].Name != "b" || len(pr.Containers[1].Devices) != 0 {
		t.Fatalf("container b = %v", pr.Containers[1])
	}

	one, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "pod-uid1", PodNamespace: "default"})
	if err != nil || one.PodResources.Name != "pod-uid1" {
		t.Fatalf("Get = %v, %v", one, err)
	}
	if _, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "nope", PodNamespace: "default"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of a missing pod = %v, want NotFound", err)
	}

	alloc, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range alloc.Devices {
		ids = append(ids, d.DeviceIds...)
	}
	if !reflect.DeepEqual(ids, []string{"d0", "d1"}) {
		t.Fatalf("allocatable devices = %v, want the healthy d0 and d1", ids)
	}
}
