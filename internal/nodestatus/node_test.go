package nodestatus

import (
	"context"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/events/eventstest"
	"github.com/minilet/minilet/internal/nodeaddr"
)

type fakeNode struct {
	memory, disk, pid bool
	plegOK            bool
}

func (f *fakeNode) Conditions() (bool, bool, bool) { return f.memory, f.disk, f.pid }
func (f *fakeNode) Healthy() (bool, time.Duration) { return f.plegOK, 4 * time.Minute }
func (f *fakeNode) Capacity() v1.ResourceList      { return v1.ResourceList{} }
func (f *fakeNode) Allocatable() v1.ResourceList   { return v1.ResourceList{} }
func (f *fakeNode) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{}, nil
}

// The node's events are the kubelet's: each condition when first reported
// and on every change, nothing while it holds.
func TestNodeEventsOnConditionChanges(t *testing.T) {
	f := &fakeNode{plegOK: true}
	rec := &eventstest.Recorder{}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	b := New(Config{NodeName: "n1", Addresses: nodeaddr.Addresses{IP: "10.0.0.1", Hostname: "n1"},
		Resources: f, Pressure: f, PLEG: f, Runtime: f, Recorder: rec, Clock: clk})
	step := func(want ...string) {
		t.Helper()
		before := len(rec.Events())
		b.Node()
		got := rec.Events()[before:]
		if len(got) == 0 {
			got = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
	step("Normal NodeHasSufficientMemory Node n1 status is now: NodeHasSufficientMemory",
		"Normal NodeHasNoDiskPressure Node n1 status is now: NodeHasNoDiskPressure",
		"Normal NodeHasSufficientPID Node n1 status is now: NodeHasSufficientPID",
		"Normal NodeReady Node n1 status is now: NodeReady")
	clk.Step(10 * time.Second)
	step()
	f.memory = true
	step("Normal NodeHasInsufficientMemory Node n1 status is now: NodeHasInsufficientMemory")
	f.plegOK = false
	step("Normal NodeNotReady Node n1 status is now: NodeNotReady")
	f.memory, f.plegOK = false, true
	step("Normal NodeHasSufficientMemory Node n1 status is now: NodeHasSufficientMemory",
		"Normal NodeReady Node n1 status is now: NodeReady")
}

type fakeImages []*runtimeapi.Image

func (f fakeImages) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return f, nil
}

// status.images is the kubelet's: largest first, capped at
// nodeStatusMaxImages, digests then tags, at most five names each.
func TestNodeImagesLargestFirstCapped(t *testing.T) {
	f := &fakeNode{plegOK: true}
	imgs := fakeImages{
		{Id: "small", RepoTags: []string{"small:1"}, Size: 10},
		{Id: "big", RepoTags: []string{"big:1", "big:2", "big:3", "big:4"}, RepoDigests: []string{"big@sha256:aa", "big@sha256:bb"}, Size: 1000},
		{Id: "mid", RepoTags: []string{"mid:1"}, Size: 100},
		{Id: "anonymous", Size: 5000},
	}
	build := func(max int) []v1.ContainerImage {
		b := New(Config{NodeName: "n1", Resources: f, Pressure: f, PLEG: f, Runtime: f, Images: imgs, MaxImages: max})
		return b.Node().Status.Images
	}
	got := build(2)
	want := []v1.ContainerImage{
		{Names: []string{"big@sha256:aa", "big@sha256:bb", "big:1", "big:2", "big:3"}, SizeBytes: 1000},
		{Names: []string{"mid:1"}, SizeBytes: 100},
	}
	// The nameless image is the largest, but there is nothing to report
	// it by: it is left out and takes no slot.
	if !reflect.DeepEqual(got, want) {
		t.Errorf("max 2: %+v, want %+v", got, want)
	}
	if got := build(-1); len(got) != 3 || !reflect.DeepEqual(got[:2], want) || got[2].Names[0] != "small:1" {
		t.Errorf("no cap: %+v", got)
	}
	if got := build(0); len(got) != 0 {
		t.Errorf("max 0: %+v, want none", got)
	}
}
