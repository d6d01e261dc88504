package cm

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A manager that has not started (an agent deciding whether it may take
// over a cgroup root) sees the pod cgroups another run left, in every QoS
// tier, and nothing else that lives there.
func TestPodCgroupsListsWhatAnEarlierRunLeft(t *testing.T) {
	m := startedManager(t, Config{})
	g, b, be := withUID(seedGuaranteed(), "g1"), withUID(seedBurstable(), "b1"), withUID(seedBestEffort(), "be1")
	for _, p := range []*v1.Pod{g, b, be} {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	// Not a pod cgroup: ignored.
	if err := m.Driver().Create(m.kubepods.Child("not-a-pod"), nil); err != nil {
		t.Fatal(err)
	}

	next := newTestManager(t, Config{CgroupRoot: m.cfg.CgroupRoot, CgroupsPerQOS: true})
	uids, err := next.PodCgroups()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(uids)
	if want := []types.UID{"b1", "be1", "g1"}; !slices.Equal(uids, want) {
		t.Errorf("PodCgroups = %v, want %v", uids, want)
	}

	for _, p := range []*v1.Pod{g, b, be} {
		if err := m.RemovePod(context.Background(), p.UID); err != nil {
			t.Fatal(err)
		}
	}
	if uids, err := next.PodCgroups(); err != nil || len(uids) != 0 {
		t.Errorf("after the pods left: %v %v, want none", uids, err)
	}
}

// A cgroup root nobody used yet has no pod cgroups (and no error).
func TestPodCgroupsOfAnUnusedRoot(t *testing.T) {
	requireCgroupV1(t)
	m := newTestManager(t, Config{CgroupRoot: testCgroupRoot(t), CgroupsPerQOS: true})
	if uids, err := m.PodCgroups(); err != nil || len(uids) != 0 {
		t.Errorf("PodCgroups = %v %v, want none", uids, err)
	}
}
