package images

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		p       Policy
		wantErr string
	}{
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}, ""},
		{Policy{HighThresholdPercent: 100, LowThresholdPercent: 100}, ""},
		{Policy{HighThresholdPercent: 101, LowThresholdPercent: 80}, "invalid HighThresholdPercent 101, must be in range [0-100]"},
		{Policy{HighThresholdPercent: -1}, "invalid HighThresholdPercent -1, must be in range [0-100]"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: -5}, "invalid LowThresholdPercent -5, must be in range [0-100]"},
		{Policy{HighThresholdPercent: 80, LowThresholdPercent: 85}, "LowThresholdPercent 85 can not be higher than HighThresholdPercent 80"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Hour}, "invalid MaxAge 1h0m0s, must be greater than MinAge 1h0m0s"},
	}
	for _, tc := range cases {
		err := tc.p.Validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%+v: unexpected error %v", tc.p, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: error %v, want %q (InvalidArgument)", tc.p, err, tc.wantErr)
		}
	}
	if !(Policy{HighThresholdPercent: 100}).Disabled() || (Policy{HighThresholdPercent: 100, MaxAge: time.Hour}).Disabled() ||
		(Policy{HighThresholdPercent: 85}).Disabled() {
		t.Error("Disabled must mean high=100 and no max age")
	}
}

func TestBytesToFree(t *testing.T) {
	p := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80}
	cases := []struct {
		disk DiskUsage
		want int64
	}{
		{DiskUsage{Capacity: 1000, Available: 500}, 0},  // 50% used
		{DiskUsage{Capacity: 1000, Available: 151}, 49}, // 84.9% used is 85% in the kubelet's integer maths
		{DiskUsage{Capacity: 1000, Available: 160}, 0},  // 84%
		{DiskUsage{Capacity: 1000, Available: 150}, 50}, // 85%: free to 80% used = 200 available
		{DiskUsage{Capacity: 1000, Available: 0}, 200},
		{DiskUsage{Capacity: 1000, Available: 5000}, 0}, // available > capacity is clamped
	}
	for _, tc := range cases {
		if got := p.BytesToFree(tc.disk); got != tc.want {
			t.Errorf("%+v: BytesToFree = %d, want %d", tc.disk, p.BytesToFree(tc.disk), tc.want)
		}
	}
}

func ids(cs []*Candidate) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	began := now.Add(-24 * time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	p := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
	full := DiskUsage{Capacity: 1000, Available: 50} // 95% used: free 150
	cases := []struct {
		name        string
		p           Policy
		disk        DiskUsage
		imgs        []*Candidate
		wantExpired []string
		wantLRU     []string
		wantFree    int64
	}{
		{
			name: "below the high threshold nothing goes",
			p:    p, disk: DiskUsage{Capacity: 1000, Available: 500},
			imgs:    []*Candidate{{ID: "a", Size: 100, FirstDetected: ago(time.Hour)}},
			wantLRU: nil, wantFree: 0,
		},
		{
			name: "in use and pinned are never candidates",
			p:    p, disk: full,
			imgs: []*Candidate{
				{ID: "used", Size: 100, FirstDetected: ago(time.Hour), LastUsed: now, InUse: true},
				{ID: "pinned", Size: 100, FirstDetected: ago(time.Hour), Pinned: true},
				{ID: "free", Size: 100, FirstDetected: ago(time.Hour)},
			},
			wantLRU: []string{"free"}, wantFree: 150,
		},
		{
			name: "younger than the minimum age stays",
			p:    p, disk: full,
			imgs: []*Candidate{
				{ID: "new", Size: 500, FirstDetected: ago(time.Minute)},
				{ID: "old", Size: 100, FirstDetected: ago(3 * time.Minute)},
				{ID: "from-before-start", Size: 100}, // zero first-detected counts as old
			},
			wantLRU: []string{"from-before-start", "old"}, wantFree: 150,
		},
		{
			name: "used at or after now stays",
			p:    p, disk: full,
			imgs: []*Candidate{
				{ID: "just-used", Size: 100, FirstDetected: ago(time.Hour), LastUsed: now},
				{ID: "future", Size: 100, FirstDetected: ago(time.Hour), LastUsed: now.Add(time.Second)},
			},
			wantFree: 150,
		},
		{
			name: "least recently used first, then first detected, then id",
			p:    p, disk: full,
			imgs: []*Candidate{
				{ID: "used-1m", Size: 10, FirstDetected: ago(time.Hour), LastUsed: ago(time.Minute)},
				{ID: "never-b", Size: 10, FirstDetected: ago(time.Hour)},
				{ID: "used-1h", Size: 10, FirstDetected: ago(2 * time.Hour), LastUsed: ago(time.Hour)},
				{ID: "never-a", Size: 10, FirstDetected: ago(time.Hour)},
				{ID: "never-old", Size: 10, FirstDetected: ago(5 * time.Hour)},
			},
			wantLRU: []string{"never-old", "never-a", "never-b", "used-1h", "used-1m"}, wantFree: 150,
		},
		{
			name: "max age removes long-unused images even below the threshold",
			p:    Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: time.Hour},
			disk: DiskUsage{Capacity: 1000, Available: 900},
			imgs: []*Candidate{
				{ID: "stale", Size: 10, FirstDetected: ago(3 * time.Hour), LastUsed: ago(2 * time.Hour)},
				{ID: "never-used-old", Size: 10, FirstDetected: ago(2 * time.Hour)},
				{ID: "recent", Size: 10, FirstDetected: ago(3 * time.Hour), LastUsed: ago(30 * time.Minute)},
				{ID: "stale-but-running", Size: 10, FirstDetected: ago(3 * time.Hour), LastUsed: now, InUse: true},
				{ID: "stale-pinned", Size: 10, FirstDetected: ago(3 * time.Hour), Pinned: true},
			},
			wantExpired: []string{"stale", "never-used-old"},
		},
		{
			name: "expired images count towards the bytes to free",
			p:    Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: time.Hour},
			disk: full,
			imgs: []*Candidate{
				{ID: "stale", Size: 200, FirstDetected: ago(3 * time.Hour), LastUsed: ago(2 * time.Hour)},
				{ID: "other", Size: 10, FirstDetected: ago(3 * time.Hour), LastUsed: ago(time.Minute)},
			},
			wantExpired: []string{"stale"}, wantFree: 150,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan := Decide(tc.p, tc.imgs, tc.disk, now, began)
			if !slices.Equal(ids(plan.Expired), nonNil(tc.wantExpired)) || !slices.Equal(ids(plan.ByLRU), nonNil(tc.wantLRU)) || plan.BytesToFree != tc.wantFree {
				t.Fatalf("plan = expired %v, lru %v, free %d; want %v, %v, %d",
					ids(plan.Expired), ids(plan.ByLRU), plan.BytesToFree, tc.wantExpired, tc.wantLRU, tc.wantFree)
			}
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func TestMaxAgeWaitsForTheAgentToHaveRun(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: time.Hour}
	stale := &Candidate{ID: "stale", Size: 1, LastUsed: now.Add(-5 * time.Hour)}
	if p.Expired(stale, now, now.Add(-30*time.Minute)) {
		t.Fatal("an image expired before the agent had run for MaxAge: its recent use may simply not have been seen")
	}
	if !p.Expired(stale, now, now.Add(-2*time.Hour)) {
		t.Fatal("an image unused for 5h did not expire with MaxAge 1h")
	}
	unknown := &Candidate{ID: "predates-agent", Size: 1}
	if p.Expired(unknown, now, now.Add(-59*time.Minute)) || !p.Expired(unknown, now, now.Add(-61*time.Minute)) {
		t.Fatal("an image unseen in use must expire MaxAge after the agent began")
	}
}

func TestNormalize(t *testing.T) {
	cases := map[string]string{
		"busybox":                        "docker.io/library/busybox:latest",
		"busybox:1.36":                   "docker.io/library/busybox:1.36",
		"docker.io/library/busybox:1.36": "docker.io/library/busybox:1.36",
		"index.docker.io/foo/bar":        "docker.io/foo/bar:latest",
		"localhost:5000/app":             "localhost:5000/app:latest",
		"localhost/app:v1":               "localhost/app:v1",
		"quay.io/x/y@sha256:abc":         "quay.io/x/y@sha256:abc",
		"busybox:1.36@sha256:abc":        "docker.io/library/busybox@sha256:abc",
		"sha256:abc":                     "sha256:abc",
	}
	for in, want := range cases {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}
