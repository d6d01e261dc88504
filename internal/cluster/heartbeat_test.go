package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/cluster/clustertest"
)

// After the API server was away, the first status sync that gets through
// writes the node's status although nothing in it changed: the Ready
// heartbeat is fresh again at once, not only once NodeStatusReportFrequency
// (5 min here, the default) has passed since the last write.
func TestHeartbeatFreshRightAfterAPIServerOutage(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{})
	c := start(t, srv, fn)
	ctx := context.Background()
	<-c.Registered()
	heartbeat := func() (metav1.Time, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return metav1.Time{}, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1.NodeReady {
				return cond.LastHeartbeatTime, string(cond.Status)
			}
		}
		return metav1.Time{}, "no Ready condition"
	}
	// Registration's own status write done (else an outage that cuts it
	// short leaves the report due anyway).
	eventually(t, "the first status written", func() (bool, string) {
		c.node.mu.Lock()
		written := !c.node.lastReport.IsZero()
		c.node.mu.Unlock()
		hb, why := heartbeat()
		return written && !hb.IsZero(), why
	})

	srv.StopAPIServer()
	// Down for four lease renewals (every 500 ms here); the outage's
	// length, not a wait for something.
	time.Sleep(2 * time.Second)
	// The API server may answer before StartAPIServer returns (on a loaded
	// machine its start took 20 s, and the node's write got in first): a
	// heartbeat from after the restart began is one from after the outage.
	back := metav1.NewTime(time.Now().Truncate(time.Second))
	srv.StartAPIServer()
	eventually(t, "a Ready heartbeat from after the outage", func() (bool, string) {
		hb, why := heartbeat()
		return !hb.Before(&back), fmt.Sprintf("Ready %s heartbeat %s, API server back at %s", why, hb.UTC(), back.UTC())
	})
}
