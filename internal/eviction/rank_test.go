package eviction

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// mkPod makes a one-container pod with a priority and, if given, a
// memory request (and no limit: Burstable; none at all: BestEffort).
func mkPod(name string, prio int32, memRequest string) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = name, "default", types.UID("uid-"+name)
	p.Spec.Priority = &prio
	c := v1.Container{Name: "app", Image: "host"}
	if memRequest != "" {
		c.Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse(memRequest)}
	}
	p.Spec.Containers = []v1.Container{c}
	return p
}

func names(pods []*v1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestRankPods(t *testing.T) {
	withDisk := func(p *v1.Pod, req string) *v1.Pod {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(req)}
		return p
	}
	cases := []struct {
		name   string
		signal Signal
		pods   []*v1.Pod
		usage  map[string]PodUsage
		want   []string
	}{
		{
			name:   "memory: over requests before under, whatever the priority",
			signal: SignalMemoryAvailable,
			pods:   []*v1.Pod{mkPod("under-low-prio", -10, "500Mi"), mkPod("over-high-prio", 1000, "100Mi")},
			usage:  map[string]PodUsage{"under-low-prio": {Memory: 400 * mi}, "over-high-prio": {Memory: 150 * mi}},
			want:   []string{"over-high-prio", "under-low-prio"},
		},
		{
			name:   "memory: then lower priority first",
			signal: SignalMemoryAvailable,
			pods:   []*v1.Pod{mkPod("hi", 100, ""), mkPod("lo", 0, ""), mkPod("mid", 50, "")},
			usage:  map[string]PodUsage{"hi": {Memory: 900 * mi}, "lo": {Memory: 10 * mi}, "mid": {Memory: 500 * mi}},
			want:   []string{"lo", "mid", "hi"},
		},
		{
			name:   "memory: then most usage above requests",
			signal: SignalMemoryAvailable,
			pods:   []*v1.Pod{mkPod("a", 0, "100Mi"), mkPod("b", 0, "10Mi"), mkPod("c", 0, "")},
			usage:  map[string]PodUsage{"a": {Memory: 300 * mi}, "b": {Memory: 250 * mi}, "c": {Memory: 230 * mi}},
			want:   []string{"b", "c", "a"}, // 240Mi, 230Mi, 200Mi above requests
		},
		{
			name:   "pods without figures go first",
			signal: SignalMemoryAvailable,
			pods:   []*v1.Pod{mkPod("measured", 0, ""), mkPod("unknown", 1000, "")},
			usage:  map[string]PodUsage{"measured": {Memory: 900 * mi}},
			want:   []string{"unknown", "measured"},
		},
		{
			name:   "disk: over ephemeral-storage requests, then priority, then usage",
			signal: SignalNodeFsAvailable,
			pods: []*v1.Pod{withDisk(mkPod("within", -5, ""), "1Gi"), withDisk(mkPod("over-small", 10, ""), "1Mi"),
				withDisk(mkPod("over-big", 10, ""), "1Mi")},
			usage: map[string]PodUsage{"within": {Disk: 100 * mi}, "over-small": {Disk: 5 * mi}, "over-big": {Disk: 50 * mi}},
			want:  []string{"over-big", "over-small", "within"},
		},
		{
			name:   "inodes rank by inodes used",
			signal: SignalImageFsInodesFree,
			pods:   []*v1.Pod{mkPod("few", 0, ""), mkPod("many", 0, "")},
			usage:  map[string]PodUsage{"few": {Inodes: 10}, "many": {Inodes: 10000}},
			want:   []string{"many", "few"},
		},
		{
			name:   "pids: priority, then most processes",
			signal: SignalPIDAvailable,
			pods:   []*v1.Pod{mkPod("hi-many", 100, ""), mkPod("lo-few", 0, ""), mkPod("lo-many", 0, "")},
			usage:  map[string]PodUsage{"hi-many": {Processes: 5000}, "lo-few": {Processes: 3}, "lo-many": {Processes: 300}},
			want:   []string{"lo-many", "lo-few", "hi-many"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			usage := map[types.UID]PodUsage{}
			for n, u := range tc.usage {
				usage[types.UID("uid-"+n)] = u
			}
			pods := slices.Clone(tc.pods)
			rankPods(tc.signal, pods, usage)
			if got := names(pods); !slices.Equal(got, tc.want) {
				t.Fatalf("order = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodRequestCountsInitContainers(t *testing.T) {
	p := mkPod("p", 0, "100Mi")
	p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("300Mi")}}}}
	if got := podRequest(p, v1.ResourceMemory); got != 300*mi {
		t.Fatalf("podRequest = %s, want 300Mi", fmt.Sprint(got))
	}
}
