package cluster_test

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/test/harness"
)

const (
	annotationMirror = "kubernetes.io/config.mirror"
	annotationHash   = "kubernetes.io/config.hash"
)

// staticManifest is a static pod "mirrored" with label rev and command cmd.
func staticManifest(rev, cmd string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: mirrored\n  namespace: default\n  labels: {rev: %q}\n"+
		"spec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: host\n    command: [sh, -c, %q]\n", rev, cmd)
}

// followDeadline is how long a mirror may take to follow a change of its
// static pod or its own deletion: generous for a loaded machine, and
// shorter than the pod workers' periodic resync (1 min), so that a mirror
// fixed only by that resync fails the test.
const followDeadline = 20 * time.Second

// waitMirror waits (harness.Deadline) for a mirror pod of name that is
// not being deleted, is not the pod notUID, shows phase Running and
// satisfies ok.
func (e *env) waitMirror(what, name string, notUID types.UID, ok func(*v1.Pod) bool) *v1.Pod {
	e.t.Helper()
	return e.waitMirrorWithin(harness.Deadline, what, name, notUID, ok)
}

// waitMirrorWithin is waitMirror with its own deadline.
func (e *env) waitMirrorWithin(deadline time.Duration, what, name string, notUID types.UID, ok func(*v1.Pod) bool) *v1.Pod {
	e.t.Helper()
	var got *v1.Pod
	mirrorWithin(e.t, deadline, what, func() (bool, string) {
		p, err := e.get(name)
		if err != nil {
			return false, err.Error()
		}
		got = p
		return p.Annotations[annotationMirror] != "" && p.UID != notUID && p.DeletionTimestamp == nil &&
				p.Status.Phase == v1.PodRunning && ok(p),
			fmt.Sprintf("uid %s mirror %q deleting %v phase %s labels %v", p.UID, p.Annotations[annotationMirror],
				p.DeletionTimestamp != nil, p.Status.Phase, p.Labels)
	})
	return got
}

func anyPod(*v1.Pod) bool { return true }

// mirrorWithin polls cond every 50 ms until it holds, failing the test once
// deadline has passed.
func mirrorWithin(t *testing.T, deadline time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", deadline, what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An admin deleting a static pod's mirror (gracefully, as kubectl does,
// or at once) gets a new mirror back while the static pod runs on.
func TestMirrorPodRecreatedAfterAdminDeletesIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.a.WriteManifest("mirrored.yaml", staticManifest("1", "sleep 100000"))
	name := e.a.Static("mirrored")
	mirror := e.waitMirror("the mirror pod Running", name, "", anyPod)
	static, ok := e.a.Pod(name)
	if !ok {
		t.Fatalf("static pod %s not on the agent", name)
	}

	for _, grace := range []*int64{nil, ptr.To[int64](0)} {
		err := e.srv.Admin.CoreV1().Pods("default").Delete(e.ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: grace, Preconditions: metav1.NewUIDPreconditions(string(mirror.UID)),
		})
		if err != nil {
			t.Fatalf("deleting the mirror pod: %v", err)
		}
		what := fmt.Sprintf("a new mirror pod after deleting it (grace %v)", ptr.Deref(grace, -1))
		mirror = e.waitMirrorWithin(followDeadline, what, name, mirror.UID, anyPod)
		if mirror.Annotations[annotationMirror] != static.Annotations[annotationHash] {
			t.Fatalf("new mirror carries hash %q, the static pod %q", mirror.Annotations[annotationMirror], static.Annotations[annotationHash])
		}
	}
	if p, _ := e.a.Pod(name); p.UID != static.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the static pod itself changed: uid %s (was %s), restarts %d", p.UID, static.UID, p.Status.ContainerStatuses[0].RestartCount)
	}
}

// A mirror pod whose hash is not the static pod's (left by someone else)
// is replaced by a mirror of the static pod that runs.
func TestMirrorPodWithAnotherHashIsReplaced(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.a.WriteManifest("mirrored.yaml", staticManifest("1", "sleep 100000"))
	name := e.a.Static("mirrored")
	mirror := e.waitMirror("the mirror pod Running", name, "", anyPod)
	hash := mirror.Annotations[annotationMirror]

	// Delete the mirror and put a stale one in its place before the agent
	// makes a new one; if the agent is first, try again.
	var stale *v1.Pod
	e.eventually("a stale mirror in place of the agent's", func() (bool, string) {
		cur, err := e.get(name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, err.Error()
		case cur.Annotations[annotationMirror] == "stale":
			stale = cur
			return true, ""
		default:
			err := e.srv.Admin.CoreV1().Pods("default").Delete(e.ctx, name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(cur.UID)),
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return false, err.Error()
			}
		}
		p := e.pod(name, "sleep", "1")
		p.Annotations = map[string]string{annotationMirror: "stale"}
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		created, err := e.srv.Admin.CoreV1().Pods("default").Create(e.ctx, p, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		stale = created
		return true, ""
	})
	e.waitMirrorWithin(followDeadline, "the stale mirror replaced", name, stale.UID, func(p *v1.Pod) bool {
		return p.Annotations[annotationMirror] == hash
	})
}

// Changing a static pod's manifest replaces its mirror with one of the
// new spec hash, which stays; removing the manifest deletes the mirror.
func TestMirrorPodFollowsManifestChanges(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.a.WriteManifest("mirrored.yaml", staticManifest("1", "sleep 100000"))
	name := e.a.Static("mirrored")
	first := e.waitMirror("the mirror pod of rev 1 Running", name, "", func(p *v1.Pod) bool { return p.Labels["rev"] == "1" })

	e.a.WriteManifest("mirrored.yaml", staticManifest("2", "exec sleep 100001"))
	second := e.waitMirrorWithin(followDeadline, "the mirror pod of rev 2 Running", name, first.UID, func(p *v1.Pod) bool {
		return p.Labels["rev"] == "2" && len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Command[2] == "exec sleep 100001"
	})
	if second.Annotations[annotationMirror] == first.Annotations[annotationMirror] {
		t.Fatalf("the new mirror kept the old hash %q", first.Annotations[annotationMirror])
	}
	static, ok := e.a.Pod(name)
	if !ok || static.Annotations[annotationHash] != second.Annotations[annotationMirror] {
		t.Fatalf("mirror hash %q, static pod's %q (found %v)", second.Annotations[annotationMirror], static.Annotations[annotationHash], ok)
	}
	// The old static pod finishing must not take the new mirror with it.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p, err := e.get(name)
		if err != nil || p.UID != second.UID || p.DeletionTimestamp != nil {
			t.Fatalf("the new mirror did not stay: %v %v", err, p)
		}
		time.Sleep(200 * time.Millisecond)
	}

	e.a.RemoveManifest("mirrored.yaml")
	mirrorWithin(t, followDeadline, "the mirror pod deleted with its manifest", func() (bool, string) {
		_, err := e.get(name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
