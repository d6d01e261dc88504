package cm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/errdefs"
)

// claimedManager starts a manager for the agent with root dir owner on
// cgroupRoot, with its lock files in lockDir.
func claimedManager(t *testing.T, cgroupRoot, lockDir, owner string) (*Manager, error) {
	t.Helper()
	m := newTestManager(t, Config{CgroupRoot: cgroupRoot, CgroupsPerQOS: true, Owner: owner, LockDir: lockDir})
	t.Cleanup(m.Close)
	return m, m.Start(context.Background())
}

// A second agent on a cgroup root a live agent holds exits at start,
// naming the holder and the flag to change, and touches nothing.
func TestSecondAgentOnAHeldCgroupRootIsRefused(t *testing.T) {
	first := startedManager(t, Config{})
	lockDir, ownerA, ownerB := t.TempDir(), t.TempDir(), t.TempDir()
	first.cfg.Owner, first.cfg.LockDir = ownerA, lockDir
	if err := first.claim(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	pod := withUID(seedBurstable(), "a-pod")
	if err := first.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}

	second, err := claimedManager(t, first.cfg.CgroupRoot, lockDir, ownerB)
	want := fmt.Sprintf("--cgroup-root %s is held by the minilet with root dir %s (pid %d); give this agent its own --cgroup-root",
		first.cfg.CgroupRoot, ownerA, os.Getpid())
	if err == nil || err.Error() != want || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second Start: %v\nwant: %s", err, want)
	}
	// Even a caller that went on regardless cleans up nothing.
	if err := second.CleanupOrphans(context.Background(), nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CleanupOrphans without the cgroup root: %v, want a conflict", err)
	}
	if !first.Driver().Exists(first.podName(podClass(pod), pod.UID)) {
		t.Fatal("the first agent's pod cgroup is gone")
	}

	// The same agent, restarted, takes its root back.
	first.Close()
	again, err := claimedManager(t, first.cfg.CgroupRoot, lockDir, ownerA)
	if err != nil {
		t.Fatalf("restart of the holder: %v", err)
	}
	if uids, _ := again.PodCgroups(); len(uids) != 1 || uids[0] != pod.UID {
		t.Errorf("restarted agent sees pods %v, want its own", uids)
	}
}

// Pods an agent left in its cgroup root while it is stopped are not the
// next agent's orphans: another agent is refused until the first comes
// back or its root dir is gone.
func TestCgroupRootWithAStoppedAgentsPodsIsRefused(t *testing.T) {
	first := startedManager(t, Config{})
	lockDir, ownerA, ownerB := t.TempDir(), t.TempDir(), t.TempDir()
	first.cfg.Owner, first.cfg.LockDir = ownerA, lockDir
	if err := first.claim(); err != nil {
		t.Fatal(err)
	}
	pod := withUID(seedGuaranteed(), "left-behind")
	if err := first.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	first.Close() // the agent stops; its pod runs on

	_, err := claimedManager(t, first.cfg.CgroupRoot, lockDir, ownerB)
	if err == nil || !errors.Is(err, errdefs.ErrConflict) ||
		!strings.Contains(err.Error(), "holds the cgroups of 1 pod(s) that the minilet with root dir "+ownerA+" left running while it is stopped") ||
		!strings.Contains(err.Error(), "give this agent its own --cgroup-root") {
		t.Fatalf("second Start: %v, want a refusal naming %s and --cgroup-root", err, ownerA)
	}
	if !first.Driver().Exists(first.podName(podClass(pod), pod.UID)) {
		t.Fatal("the stopped agent's pod cgroup is gone")
	}
	// The refused agent left the record naming the pods' agent: asked
	// again, it is refused again, and the first agent comes back.
	if _, err := claimedManager(t, first.cfg.CgroupRoot, lockDir, ownerB); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("asked again: %v, want a conflict", err)
	}
	back, err := claimedManager(t, first.cfg.CgroupRoot, lockDir, ownerA)
	if err != nil {
		t.Fatalf("the first agent coming back: %v", err)
	}
	back.Close()

	// The first agent's root dir is removed: nobody will come back for
	// its pods, which are now orphans for whoever takes the root.
	if err := os.RemoveAll(ownerA); err != nil {
		t.Fatal(err)
	}
	next, err := claimedManager(t, first.cfg.CgroupRoot, lockDir, ownerB)
	if err != nil {
		t.Fatalf("after the first agent's root dir is gone: %v", err)
	}
	if err := next.CleanupOrphans(context.Background(), map[types.UID]bool{}); err != nil {
		t.Fatal(err)
	}
	if uids, _ := next.PodCgroups(); len(uids) != 0 {
		t.Errorf("orphans left: %v", uids)
	}
}
