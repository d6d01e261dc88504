package cluster_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Deleting many pods at once costs the API server one final DELETE per
// pod from the node, not a storm of repeats: a pod the node already let go
// is not taken back while its DELETE waits for the client's rate limit.
func TestDeletingManyPodsSendsOneDeleteEach(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 40
	for i := range n {
		e.create(e.pod(fmt.Sprintf("many-%02d", i), "sleep", "1000"))
	}
	onNode := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", e.a.NodeName).String()}
	pods := e.srv.Admin.CoreV1().Pods("default")
	e.eventually("all pods Running", func() (bool, string) {
		list, err := pods.List(e.ctx, onNode)
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == v1.PodRunning {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d of %d Running", running, n)
	})
	user := "system:node:" + e.a.NodeName
	before := e.srv.AuditCounts(user)
	for i := range n {
		if err := pods.Delete(e.ctx, fmt.Sprintf("many-%02d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.eventually("all pods gone", func() (bool, string) {
		list, err := pods.List(e.ctx, onNode)
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})
	after := e.srv.AuditCounts(user)
	deletes := after["delete pods"] - before["delete pods"]
	patches := after["patch pods/status"] - before["patch pods/status"]
	t.Logf("node requests for %d deletions: %d DELETE, %d status patches", n, deletes, patches)
	if deletes != n {
		t.Errorf("the node sent %d DELETEs for %d pods, want one each", deletes, n)
	}
}
