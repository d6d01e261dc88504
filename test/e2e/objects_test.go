package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/test/harness"
)

// A standalone agent serves ConfigMaps and Secrets from
// --object-manifest-path to pods' volumes and env, as the API server does
// in a cluster; an edit of the folder reaches the running pod's volume.
func TestObjectFolderFeedsVolumesAndEnv(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		requireRoot(t)
		objectScenario(t, func(args ...string) *harness.Agent {
			a := harness.New(t)
			a.ExtraArgs = args
			a.Start()
			return a
		}, "host")
	})
	t.Run("containerd", func(t *testing.T) {
		requireRoot(t)
		harness.ContainerdEndpoint(t)
		objectScenario(t, func(args ...string) *harness.Agent {
			a := harness.New(t)
			a.UseContainerd()
			a.ExtraArgs = append(a.ExtraArgs, args...)
			a.Start()
			return a
		}, harness.BusyboxImage)
	})
}

func objectScenario(t *testing.T, start func(args ...string) *harness.Agent, image string) {
	dir := t.TempDir()
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	objects := `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello, color: blue}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: hunter2}
`
	write(objects)
	// A short sync period, so that the edit below shows within seconds
	// (the default minute is the kubelet's).
	a := start("--object-manifest-path", dir, "--sync-frequency", "3s")
	name := fmt.Sprintf("objs-%d", os.Getpid()%100000)
	a.WriteManifest(name+".yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  volumes:
  - {name: settings, configMap: {name: settings}}
  - {name: creds, secret: {secretName: creds, defaultMode: 0400}}
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo color=$COLOR password=$PASSWORD; while true; do cat /etc/settings/greeting; echo; sleep 0.2; done"]
    env:
    - name: COLOR
      valueFrom: {configMapKeyRef: {name: settings, key: color}}
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: creds, key: password}}
    volumeMounts:
    - {name: settings, mountPath: /etc/settings}
    - {name: creds, mountPath: /etc/creds, readOnly: true}
`, name, image))
	pod := a.Static(name)
	logs := func(want string) {
		t.Helper()
		a.Eventually("the pod's log shows "+want, func() (bool, string) {
			out, err := a.CLI("logs", pod)
			return err == nil && strings.Contains(out, want), fmt.Sprint(out, err)
		})
	}
	logs("color=blue password=hunter2")
	logs("hello")
	write(strings.Replace(objects, "greeting: hello", "greeting: bonjour", 1))
	// Within the sync period: the worker's periodic resync rewrites the
	// volume.
	logs("bonjour")
}
