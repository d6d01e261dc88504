package store

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestPodStatusesSurviveARestart: what one run saves, the next reads back
// (readiness of the exact container included); a removed pod is gone from
// disk; an unreadable file is skipped, not fatal.
func TestPodStatusesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first := OpenPodStatuses(dir, log)
	started, notStarted := true, false
	st := v1.PodStatus{Phase: v1.PodRunning,
		ContainerStatuses: []v1.ContainerStatus{
			{Name: "main", ContainerID: "minilet://c1", Ready: true, Started: &started},
			{Name: "slow", ContainerID: "minilet://c2", Started: &notStarted},
		},
		InitContainerStatuses: []v1.ContainerStatus{{Name: "proxy", ContainerID: "minilet://s1", Started: &started}},
	}
	first.Save("a", st)
	if err := os.MkdirAll(filepath.Join(dir, "bad"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad", "status.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}

	second := OpenPodStatuses(dir, log)
	got, ok := second.Restored("a")
	if !ok || got.Phase != v1.PodRunning {
		t.Fatalf("restored status = %+v, %v", got, ok)
	}
	if _, ok := second.Restored("bad"); ok {
		t.Error("an unreadable saved status was restored")
	}
	if !second.WasReady("minilet://c1") || second.WasReady("minilet://other") {
		t.Error("readiness of the saved container not restored exactly")
	}
	if !second.WasStarted("minilet://c1") || !second.WasStarted("minilet://s1") ||
		second.WasStarted("minilet://c2") || second.WasStarted("minilet://other") {
		t.Error("startup of the saved containers (app and sidecar) not restored exactly")
	}
	second.Remove("a")
	if _, ok := OpenPodStatuses(dir, log).Restored("a"); ok {
		t.Error("a removed pod's saved status is still on disk")
	}
}
