package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func podEvent(ns, pod, name string, at time.Time, count int32) *v1.Event {
	ts := metav1.NewTime(at)
	return &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: pod},
		Type:           v1.EventTypeNormal, Reason: "Started", Message: "Started container " + name,
		FirstTimestamp: ts, LastTimestamp: ts, Count: count,
	}
}

func open(t *testing.T, cfg EventsConfig, clk *clocktesting.FakeClock) *Events {
	t.Helper()
	s, err := OpenEvents(cfg, clk, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func names(evs []v1.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func TestEventsPutListUpdate(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := open(t, EventsConfig{Dir: t.TempDir()}, clk)
	node := podEvent("default", "node1", "node1.1", t0, 1)
	node.InvolvedObject = v1.ObjectReference{Kind: "Node", Name: "node1"}
	err := s.PutEvents([]*v1.Event{
		podEvent("ns1", "a", "a.1", t0, 1), podEvent("ns1", "a", "a.2", t0, 1),
		podEvent("ns1", "b", "b.1", t0, 1), podEvent("ns2", "a", "a.3", t0, 1), node,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ns, name, want string }{
		{"ns1", "a", "a.1,a.2"},
		{"ns1", "", "a.1,a.2,b.1"},
		{"ns2", "a", "a.3"},
		{"", "node1", "node1.1"},
		{"", "", "a.1,a.2,a.3,b.1,node1.1"},
		{"ns1", "nope", ""},
	} {
		got, err := s.List(tc.ns, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if names(got) != tc.want {
			t.Errorf("List(%q, %q) = %s, want %s", tc.ns, tc.name, names(got), tc.want)
		}
	}
	// An update (same namespace/name) replaces the event.
	if err := s.Put(podEvent("ns1", "a", "a.1", t0.Add(time.Minute), 7)); err != nil {
		t.Fatal(err)
	}
	got, _ := s.List("ns1", "a")
	if len(got) != 2 || s.Len() != 5 {
		t.Fatalf("after update: %d events for ns1/a, %d in all; want 2 and 5", len(got), s.Len())
	}
	for _, e := range got {
		if e.Name == "a.1" && (e.Count != 7 || !e.LastTimestamp.Time.Equal(t0.Add(time.Minute))) {
			t.Fatalf("updated event count %d last %v", e.Count, e.LastTimestamp)
		}
	}
	if err := s.Put(&v1.Event{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("nameless event: err = %v", err)
	}
}

func TestEventsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(t0)
	s, err := OpenEvents(EventsConfig{Dir: dir}, clk, discard())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := s.Put(podEvent("ns1", "a", fmt.Sprintf("a.%d", i), t0, int32(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, EventsConfig{Dir: dir}, clk)
	got, err := s2.List("ns1", "a")
	if err != nil || len(got) != 20 || s2.Len() != 20 {
		t.Fatalf("after reopen: %d events (Len %d), err %v; want 20", len(got), s2.Len(), err)
	}
	for _, e := range got {
		var i int
		fmt.Sscanf(e.Name, "a.%d", &i)
		if e.Count != int32(i+1) || e.Message != "Started container "+e.Name {
			t.Fatalf("event %s came back as count %d message %q", e.Name, e.Count, e.Message)
		}
	}
}

func TestEventsTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := open(t, EventsConfig{Dir: t.TempDir()}, clk) // TTL 1h, purge at most every minute
	if err := s.PutEvents([]*v1.Event{podEvent("ns1", "a", "old", t0, 1), podEvent("ns1", "a", "new", t0.Add(30*time.Minute), 1)}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	if got, _ := s.List("ns1", "a"); names(got) != "new,old" {
		t.Fatalf("at exactly the TTL: %s, want both", names(got))
	}
	clk.Step(time.Second)
	if got, _ := s.List("ns1", "a"); names(got) != "new" {
		t.Fatalf("past the TTL: %s, want only new (expired events are hidden before the purge)", names(got))
	}
	if s.Len() != 2 {
		t.Fatalf("Len %d before purge", s.Len())
	}
	// A write purges when the last purge is a PurgeInterval old.
	if err := s.Put(podEvent("ns1", "b", "b.1", clk.Now(), 1)); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("Len %d after a purging write, want 2", s.Len())
	}
	clk.Step(31 * time.Minute)
	if n, err := s.Purge(); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1 (the 30-minute event)", n, err)
	}
	if got, _ := s.List("", ""); names(got) != "b.1" {
		t.Fatalf("left %s", names(got))
	}
}

func TestEventsCapDropsOldest(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := open(t, EventsConfig{Dir: t.TempDir(), MaxEvents: 100}, clk)
	var batch []*v1.Event
	for i := 0; i < 250; i++ {
		batch = append(batch, podEvent("ns1", "a", fmt.Sprintf("e%03d", i), t0.Add(time.Duration(i)*time.Millisecond), 1))
		if len(batch) == 30 {
			if err := s.PutEvents(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	if err := s.PutEvents(batch); err != nil {
		t.Fatal(err)
	}
	got, _ := s.List("", "")
	if len(got) != 100 || s.Len() != 100 {
		t.Fatalf("%d events stored (Len %d), want the cap of 100", len(got), s.Len())
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
	if got[0].Name != "e150" || got[99].Name != "e249" {
		t.Fatalf("kept %s..%s, want the newest e150..e249", got[0].Name, got[99].Name)
	}
}

func corruptDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, EventsFile+".corrupt-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEventsDamagedFileIsMovedAside(t *testing.T) {
	full := func(t *testing.T, dir string) {
		s, err := OpenEvents(EventsConfig{Dir: dir}, clocktesting.NewFakeClock(t0), discard())
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 40; i++ {
			var batch []*v1.Event
			for j := 0; j < 50; j++ {
				batch = append(batch, podEvent("ns1", "a", fmt.Sprintf("e%d-%d", i, j), t0, 1))
			}
			if err := s.PutEvents(batch); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("not a bolt database ", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated to a few bytes", func(t *testing.T, path string) {
			full(t, filepath.Dir(path))
			if err := os.Truncate(path, 100); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated mid-file", func(t *testing.T, path string) {
			full(t, filepath.Dir(path))
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta pages zeroed", func(t *testing.T, path string) {
			full(t, filepath.Dir(path))
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 2*os.Getpagesize()), 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, EventsFile)
			tc.damage(t, path)
			clk := clocktesting.NewFakeClock(t0)
			s := open(t, EventsConfig{Dir: dir}, clk)
			aside := corruptDirs(t, dir)
			if len(aside) != 1 {
				t.Fatalf("damaged file moved to %v, want one events.db.corrupt-* file", aside)
			}
			if got, err := s.List("", ""); err != nil || len(got) != 0 {
				t.Fatalf("fresh store lists %d events, err %v", len(got), err)
			}
			if err := s.Put(podEvent("ns1", "a", "a.1", t0, 1)); err != nil {
				t.Fatalf("fresh store cannot write: %v", err)
			}
			if got, _ := s.List("ns1", "a"); len(got) != 1 {
				t.Fatalf("fresh store lists %d after a write", len(got))
			}
		})
	}
}

func TestEventsLockedByAnotherOpener(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(t0)
	open(t, EventsConfig{Dir: dir}, clk)
	_, err := OpenEvents(EventsConfig{Dir: dir, OpenTimeout: 50 * time.Millisecond}, clk, discard())
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v, want an ErrUnavailable naming the lock", err)
	}
	if aside := corruptDirs(t, dir); len(aside) != 0 {
		t.Fatalf("a locked file must not be moved aside: %v", aside)
	}
}

func TestEventsConfigValidation(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	for _, tc := range []struct {
		cfg   EventsConfig
		field string
	}{
		{EventsConfig{}, "Dir"},
		{EventsConfig{Dir: t.TempDir(), TTL: -time.Second}, "TTL"},
		{EventsConfig{Dir: t.TempDir(), MaxEvents: -1}, "MaxEvents"},
	} {
		_, err := OpenEvents(tc.cfg, clk, discard())
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("OpenEvents(%+v) = %v, want an invalid-argument error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestEventsCompactedOnOpenAfterPurge(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(t0)
	s, err := OpenEvents(EventsConfig{Dir: dir}, clk, discard())
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 2000)
	for i := 0; i < 20; i++ {
		var batch []*v1.Event
		for j := 0; j < 250; j++ {
			e := podEvent("ns1", "a", fmt.Sprintf("old-%d-%d", i, j), t0, 1)
			e.Message = big
			batch = append(batch, e)
		}
		if err := s.PutEvents(batch); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(2 * time.Hour)
	if err := s.Put(podEvent("ns1", "a", "fresh", clk.Now(), 3)); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 { // the write purged the 5000 expired events
		t.Fatalf("Len %d after a purging write, want 1", s.Len())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, EventsFile)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s2 := open(t, EventsConfig{Dir: dir}, clk)
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if before.Size() < 8<<20 || after.Size() > before.Size()/8 {
		t.Fatalf("file %d bytes before reopen, %d after; want it compacted", before.Size(), after.Size())
	}
	got, err := s2.List("ns1", "a")
	if err != nil || len(got) != 1 || got[0].Name != "fresh" || got[0].Count != 3 {
		t.Fatalf("after compaction: %v, %v; want the fresh event", names(got), err)
	}
	if err := s2.Put(podEvent("ns1", "b", "b.1", clk.Now(), 1)); err != nil || s2.Len() != 2 {
		t.Fatalf("write after compaction: %v, Len %d", err, s2.Len())
	}
}
