package agent

import (
	"testing"

	"github.com/minilet/minilet/internal/config"
)

// The agent hands --event-spam-key-per-reason to the correlator, and
// leaves the client-go key (no reason) by default.
func TestEventsConfigSpamKey(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := &config.Config{EventSpamKeyPerReason: on}
		if got := eventsConfig(cfg, nil).Correlator.SpamKeyPerReason; got != on {
			t.Errorf("EventSpamKeyPerReason %v: correlator got SpamKeyPerReason %v", on, got)
		}
	}
}
