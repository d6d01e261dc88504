package lifecycle

import (
	"testing"
	"time"
)

// The sync loop is healthy until it has gone max(2×syncFrequency, 5m)
// without beginning an iteration; before its first one it is healthy.
func TestSyncLoopHealth(t *testing.T) {
	if got := HealthThreshold(time.Minute); got != 5*time.Minute {
		t.Errorf("threshold for syncFrequency 1m = %s, want 5m", got)
	}
	if got := HealthThreshold(10 * time.Minute); got != 20*time.Minute {
		t.Errorf("threshold for syncFrequency 10m = %s, want 20m", got)
	}
	var l Loop
	now := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	if err := l.Healthy(now, 5*time.Minute); err != nil {
		t.Errorf("before the first iteration: %v", err)
	}
	l.entered.Store(now.Add(-4 * time.Minute).UnixNano())
	if err := l.Healthy(now, 5*time.Minute); err != nil {
		t.Errorf("4 minutes after an iteration: %v", err)
	}
	l.entered.Store(now.Add(-6 * time.Minute).UnixNano())
	if err := l.Healthy(now, 5*time.Minute); err == nil {
		t.Error("6 minutes without an iteration counts as healthy")
	}
}
