package cli

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/server"
)

// mutableAgent is an agent whose pods change while a command runs.
type mutableAgent struct {
	*agentData
	mu sync.Mutex
}

func (a *mutableAgent) Pods() []v1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]v1.Pod, len(a.pods))
	for i := range a.pods {
		a.pods[i].DeepCopyInto(&out[i])
	}
	return out
}

func (a *mutableAgent) update(fn func([]v1.Pod) []v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods = fn(a.pods)
}

func TestGetKubectlFlags(t *testing.T) {
	a := testAgent(t)
	a.events[0].Namespace, a.events[0].Labels = "default", map[string]string{"app": "web"}
	url := startAgent(t, a)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "pod", "web"}, `NAMESPACE NAME READY STATUS RESTARTS AGE
default web-node1 1/1 Running 2 (3m ago) 10m`},
		{[]string{"get", "pods", "-o", "name"}, "pod/web-node1\npod/db-node1"},
		{[]string{"get", "po", "web", "-o", "name"}, "pod/web-node1"},
		{[]string{"get", "pods", "-l", "app=web"}, `NAMESPACE NAME READY STATUS RESTARTS AGE
default web-node1 1/1 Running 2 (3m ago) 10m`},
		{[]string{"get", "pods", "-l", "app!=web", "-o", "name"}, "pod/db-node1"},
		{[]string{"get", "pods", "-l", "app in (db,cache)"}, "No resources found."},
		{[]string{"get", "pods", "-n", "kube-system"}, `NAME READY STATUS RESTARTS AGE
db-node1 1/2 CrashLoopBackOff 5 120m`},
		{[]string{"get", "pods", "-n", "kube-system", "-A", "-o", "name"}, "pod/web-node1\npod/db-node1"},
		{[]string{"get", "events", "-l", "app=web", "-o", "name"}, "event/web-node1.1"},
		{[]string{"get", "events", "-n", "default"}, `LAST SEEN TYPE REASON OBJECT MESSAGE
3m Normal Started pod/web-node1 Started container nginx`},
		{[]string{"get", "node", "-o", "name"}, "node/node1"},
		{[]string{"get", "po/web", "pod/db-node1", "-o", "name"}, "pod/web-node1\npod/db-node1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, _, err := run(t, url, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got := table(out); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestGetErrorsAsKubectl(t *testing.T) {
	url := startAgent(t, testAgent(t))
	_, _, err := run(t, url, "get", "nonsense")
	if !errdefs.IsNotFound(err) || err.Error() != `the server doesn't have a resource type "nonsense"` {
		t.Errorf("unknown type: %v", err)
	}
	if _, _, err := run(t, url, "get", "secret/x"); !errdefs.IsNotFound(err) || err.Error() != `the server doesn't have a resource type "secret"` {
		t.Errorf("unknown type in TYPE/NAME: %v", err)
	}
	if _, _, err := run(t, url, "get"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("no type: %v", err)
	}
	// Found names are printed, the missing ones make it fail.
	out, _, err := run(t, url, "get", "pods", "web", "ghost", "-o", "name")
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `pods "ghost" not found`) || out != "pod/web-node1\n" {
		t.Errorf("partly missing: %v, output %q", err, out)
	}
	if _, _, err := run(t, url, "get", "pods", "-l", "app=(("); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "-l") {
		t.Errorf("bad selector: %v", err)
	}
	if _, _, err := run(t, url, "get", "images", "-w"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("-w on images: %v", err)
	}
	if _, _, err := run(t, url, "get", "node", "other"); !errdefs.IsNotFound(err) {
		t.Errorf("another node: %v", err)
	}
}

// TestGetPodsWatch lists, then prints one line per change: a pod whose
// status changed, a new pod, and a pod that went away.
func TestGetPodsWatch(t *testing.T) {
	a := &mutableAgent{agentData: testAgent(t)}
	srv := httptest.NewServer(server.New(server.Config{Pods: a, Node: a, Events: a}).Handler())
	t.Cleanup(srv.Close)
	srvURL := srv.URL

	root := &cobra.Command{Use: "minilet", SilenceUsage: true, SilenceErrors: true}
	AddCommands(root, Options{Now: func() time.Time { return now }, WatchInterval: 5 * time.Millisecond})
	out := &syncWriter{}
	root.SetOut(out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"--server", srvURL, "get", "pods", "-w", "-o", "name"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitOutput(t, out, "pod/web-node1\npod/db-node1\n")

	a.update(func(pods []v1.Pod) []v1.Pod {
		pods[0].Status.ContainerStatuses[0].RestartCount++ // web restarted
		return append(pods[1:2], v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new-node1", Namespace: "default"}}, pods[0])
	})
	waitOutput(t, out, "pod/web-node1\npod/db-node1\npod/new-node1\npod/web-node1\n")
	a.update(func(pods []v1.Pod) []v1.Pod { return pods[:2] }) // web-node1 gone
	waitOutput(t, out, "pod/web-node1\npod/db-node1\npod/new-node1\npod/web-node1\npod/web-node1\n")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
