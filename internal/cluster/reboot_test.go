package cluster

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/internal/events/eventstest"
)

// A node whose API object carries another boot ID than the machine's was
// rebooted since it last reported: the kubelet records Rebooted once.
func TestRebootedEventOnANewBootID(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{TokenNodes: []string{fn.name}})
	ctx := context.Background()
	old := fn.build()
	old.Status.NodeInfo.BootID = "boot-before"
	if _, err := srv.Admin.CoreV1().Nodes().Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := &eventstest.Recorder{}
	c, err := New(Config{
		Kubeconfig: srv.NodeKubeconfig(fn.name), NodeName: fn.name,
		NodeStatusUpdateFrequency: 200 * time.Millisecond, LeaseDurationSeconds: 2,
		Recorder: rec, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	build := func() *v1.Node {
		n := fn.build()
		n.Status.NodeInfo.BootID = "boot-after"
		return n
	}
	if err := c.Start(cctx, build); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); c.Stop() })
	eventually(t, "the node's boot ID updated", func() (bool, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Status.NodeInfo.BootID == "boot-after", n.Status.NodeInfo.BootID
	})
	// Several more status writes, and still one event.
	n0, _ := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
	eventually(t, "later status writes", func() (bool, string) {
		fn.mu.Lock()
		fn.ready = v1.ConditionFalse
		fn.mu.Unlock()
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.ResourceVersion != n0.ResourceVersion, "no write yet"
	})
	want := "Warning Rebooted Node " + fn.name + " has been rebooted, boot id: boot-after"
	if got := rec.Events(); len(got) != 1 || got[0] != want {
		t.Errorf("events %q, want exactly %q", got, want)
	}
}
