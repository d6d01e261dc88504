package status

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/container"
)

// TestTerminationMessagesShareThePodCap: a container's message is its
// state's message; all of a pod's messages share 12 KiB evenly (init
// containers counted), each keeping its beginning, current and last state
// alike, never cut inside a character.
func TestTerminationMessagesShareThePodCap(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, []string{"init"}, "a", "b")
	share := 12 * 1024 / 3

	ini := exited("init", t0, 0, 0)
	ini.Message = "short"
	old := exited("a", t0, 1, 0)
	old.Message = strings.Repeat("x", share-1) + "é" // the 2-byte rune straddles the cut
	cur := exited("a", t0.Add(time.Minute), 2, 1)
	cur.Message = strings.Repeat("y", 4096)
	b := running("b", t0)
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{ini, old, cur, b}}
	s := Generator{}.Generate(pod, rs, nil, nil, t0)

	if got := s.InitContainerStatuses[0].State.Terminated.Message; got != "short" {
		t.Fatalf("init message = %q", got)
	}
	a := s.ContainerStatuses[0]
	if got := a.State.Terminated.Message; got != strings.Repeat("y", share) {
		t.Fatalf("current message: %d bytes, want the first %d", len(got), share)
	}
	if got := a.LastTerminationState.Terminated.Message; got != strings.Repeat("x", share-1) || !utf8.ValidString(got) {
		t.Fatalf("last message: %d bytes, want the %d before the cut character", len(got), share-1)
	}

	// A pod of one container keeps its whole 4 KiB message.
	one := testPod(v1.RestartPolicyNever, nil, "a")
	s = Generator{}.Generate(one, &container.PodStatus{Containers: []*container.ContainerStatus{cur}}, nil, nil, t0)
	if got := s.ContainerStatuses[0].State.Terminated.Message; len(got) != 4096 {
		t.Fatalf("single container message: %d bytes, want 4096", len(got))
	}
}
