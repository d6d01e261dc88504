package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// A pod whose disk emptyDir outgrows its sizeLimit is evicted, as the
// kubelet's eviction manager does at its next observation: Failed,
// reason Evicted, the kubelet's message, and a Warning Evicted event.
func TestEmptyDirSizeLimitEvicts(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	mnt := "/tmp/minilet-sizelimit-" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() { _ = os.RemoveAll(mnt) })
	a.WriteManifest("filler.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: filler}
spec:
  volumes:
  - {name: scratch, emptyDir: {sizeLimit: 1Mi}}
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "head -c 8388608 /dev/zero > %[1]s/fill && exec sleep 1000"]
    volumeMounts:
    - {name: scratch, mountPath: %[1]s}
`, mnt))
	name := a.Static("filler")
	const want = `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `
	a.Eventually("the pod is evicted for its emptyDir", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.Status.Phase == v1.PodFailed && p.Status.Reason == "Evicted" && p.Status.Message == want,
			describe(p, ok) + " message=" + p.Status.Message
	})
	a.Eventually("an Evicted event", func() (bool, string) {
		evs := a.Events("default/" + name)
		seen := ""
		for _, e := range evs {
			if e.Reason == "Evicted" && e.Type == v1.EventTypeWarning && e.Message == want {
				return true, ""
			}
			seen += fmt.Sprintf("\n%s %s %q", e.Type, e.Reason, e.Message)
		}
		return false, "events:" + seen
	})
	a.Eventually("its container stopped", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && s.State.Terminated != nil, describe(p, ok)
	})
}
