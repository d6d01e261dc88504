package eviction

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestParseThresholdValue(t *testing.T) {
	cases := []struct {
		in       string
		want     string
		disabled bool
		err      bool
	}{
		{"100Mi", "100Mi", false, false},
		{"10%", "10%", false, false},
		{"0.5%", "0.5%", false, false},
		{"0%", "0%", true, false},
		{"0", "0", true, false},
		{"-1Mi", "", false, true},
		{"101%", "", false, true},
		{"x%", "", false, true},
		{"abc", "", false, true},
	}
	for _, tc := range cases {
		v, disabled, err := ParseThresholdValue(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%q: err = %v", tc.in, err)
			continue
		}
		if err == nil && (v.String() != tc.want || disabled != tc.disabled) {
			t.Errorf("%q: got %s disabled=%v, want %s disabled=%v", tc.in, v, disabled, tc.want, tc.disabled)
		}
	}
}

// Bad options are rejected as InvalidArgument, naming the field.
func TestConfigValidate(t *testing.T) {
	soft := hard(SignalMemoryAvailable, "1Gi")
	soft.GracePeriod = time.Minute
	withReclaim := hard(SignalMemoryAvailable, "100Mi")
	withReclaim.MinReclaim = &ThresholdValue{Percentage: 0}
	both := hard(SignalMemoryAvailable, "100Mi")
	both.Value.Percentage = 0.1
	cases := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"zero value", Config{}, ""},
		{"hard and soft", Config{Hard: []Threshold{hard(SignalMemoryAvailable, "100Mi"), hardPct(SignalNodeFsAvailable, 1)}, Soft: []Threshold{soft}}, ""},
		{"zero min reclaim", Config{Hard: []Threshold{withReclaim}}, ""},
		{"unknown signal", Config{Hard: []Threshold{hard(SignalMemoryAvailable, "1"), hard("bogus.signal", "1")}}, `Hard[1].Signal: unknown eviction signal "bogus.signal"`},
		{"no value", Config{Hard: []Threshold{{Signal: SignalPIDAvailable}}}, "Hard[0].Value: needs a Quantity or a Percentage"},
		{"both values", Config{Hard: []Threshold{both}}, "Hard[0].Value: set Quantity or Percentage, not both"},
		{"negative quantity", Config{Hard: []Threshold{hard(SignalMemoryAvailable, "-1Mi")}}, "Hard[0].Value.Quantity: -1Mi must not be negative"},
		{"percentage above 1", Config{Hard: []Threshold{hardPct(SignalNodeFsAvailable, 10)}}, "Hard[0].Value.Percentage: 10 must be a fraction between 0 and 1"},
		{"bad min reclaim", Config{Soft: []Threshold{{Signal: SignalMemoryAvailable, Value: soft.Value, GracePeriod: time.Minute, MinReclaim: &ThresholdValue{Percentage: -0.1}}}},
			"Soft[0].MinReclaim.Percentage: -0.1 must be a fraction between 0 and 1"},
		{"hard with grace", Config{Hard: []Threshold{soft}}, "Hard[0].GracePeriod: a hard threshold (memory.available) must not have one"},
		{"soft without grace", Config{Soft: []Threshold{hard(SignalMemoryAvailable, "1Gi")}}, "Soft[0].GracePeriod: a soft threshold (memory.available) needs a positive one, got 0s"},
		{"negative period", Config{PressureTransitionPeriod: -time.Second}, "PressureTransitionPeriod: must not be negative, got -1s"},
		{"negative interval", Config{MonitoringInterval: -time.Second}, "MonitoringInterval: must not be negative"},
		{"negative timeout", Config{PodCleanupTimeout: -time.Second}, "PodCleanupTimeout: must not be negative"},
	}
	for _, tc := range cases {
		err := tc.cfg.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "":
		case !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: got %v, want InvalidArgument with %q", tc.name, err, tc.want)
		}
	}
}

func TestSignals(t *testing.T) {
	got := Signals()
	if len(got) != 9 || !slices.IsSorted(got) || !slices.Contains(got, SignalPIDAvailable) {
		t.Fatalf("Signals() = %v", got)
	}
	for _, s := range got {
		if !s.Known() {
			t.Errorf("%s not Known", s)
		}
	}
	if Signal("bogus.signal").Known() {
		t.Error("bogus.signal is Known")
	}
}
