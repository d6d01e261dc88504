package sandbox

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestStoreSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	s, err := Open(log, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(Record{ID: "a", Name: "p", Namespace: "ns", UID: "u", Ready: true, Labels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(Record{ID: "b", Name: "q", Namespace: "ns", UID: "w", Ready: true}); err != nil {
		t.Fatal(err)
	}
	if stopped, err := s.SetNotReady("a"); err != nil || !stopped {
		t.Fatalf("SetNotReady = %v, %v; want a ready sandbox stopped", stopped, err)
	}
	if stopped, err := s.SetNotReady("a"); err != nil || stopped {
		t.Fatalf("second SetNotReady = %v, %v; want no change", stopped, err)
	}
	if err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("b"); err != nil {
		t.Fatalf("removing a removed sandbox: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "torn.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	s, err = Open(log, dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Get("a")
	if err != nil || a.Ready || a.Labels["k"] != "v" {
		t.Errorf("sandbox a after reopen = %+v, %v; want it not ready, with its labels", a, err)
	}
	if _, err := s.Get("b"); !errdefs.IsNotFound(err) {
		t.Errorf("removed sandbox b: err = %v, want not found", err)
	}
	if n := len(s.List()); n != 1 {
		t.Errorf("List has %d sandboxes, want 1", n)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "torn.json.corrupt-*")); len(m) != 1 {
		t.Errorf("torn record not moved aside: %v", m)
	}
}
