package eviction

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/minilet/minilet/internal/errdefs"
)

// Config configures the eviction manager. The zero value watches
// nothing; the kubelet's default thresholds are the caller's to pass.
type Config struct {
	// Hard thresholds evict at once (grace period 1s) when met; none
	// may have a GracePeriod. Default none.
	Hard []Threshold
	// Soft thresholds evict once met for their GracePeriod, which must
	// be positive. Default none.
	Soft []Threshold
	// PressureTransitionPeriod is how long a pressure condition stays
	// after its threshold was last met. Default 5m.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriod bounds the grace period of pods evicted for a
	// soft threshold: min(this, the pod's terminationGracePeriodSeconds);
	// negative uses the pod's own. Default 0.
	MaxPodGracePeriod time.Duration
	// MonitoringInterval between observations. Default 10s.
	MonitoringInterval time.Duration
	// PodCleanupTimeout is how long to wait for an evicted pod to go
	// before evicting another. Default 30s.
	PodCleanupTimeout time.Duration
}

// Signal is an eviction signal name, like "memory.available".
type Signal string

// The eviction signals the manager knows (the kubelet's Linux set).
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalContainerFsAvailable       Signal = "containerfs.available"
	SignalContainerFsInodesFree      Signal = "containerfs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// Signals lists the known signals, sorted by name.
func Signals() []Signal { return slices.Sorted(maps.Keys(signalResource)) }

// Known reports whether the manager knows the signal.
func (s Signal) Known() bool {
	_, ok := signalResource[s]
	return ok
}

// Threshold is one eviction threshold, e.g. memory.available<100Mi: it is
// met when the signal's available amount is below Value.
type Threshold struct {
	Signal Signal // required, one of Signals()
	Value  ThresholdValue
	// GracePeriod is how long a soft threshold must be met before it
	// evicts; hard thresholds have none.
	GracePeriod time.Duration
	// MinReclaim, if set, keeps a met threshold met until the signal is
	// this much above Value (evictionMinimumReclaim). Default none.
	MinReclaim *ThresholdValue
}

// ThresholdValue is an absolute quantity or a percentage of capacity;
// exactly one is set.
type ThresholdValue struct {
	Quantity   *resource.Quantity // in the signal's unit; not negative
	Percentage float64            // fraction in (0, 1]; 0.1 = 10%
}

// String renders a threshold the way the flag takes it: "memory.available<100Mi".
func (t Threshold) String() string {
	return string(t.Signal) + "<" + t.Value.String()
}

// String renders the value as a quantity or a percentage.
func (v ThresholdValue) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(v.Percentage*100, 'f', -1, 64) + "%"
}

// ParseThresholdValue parses "100Mi" or "10%". disabled is true for a zero
// value ("0", "0%"), which turns the threshold off.
func ParseThresholdValue(s string) (v ThresholdValue, disabled bool, err error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil {
			return v, false, fmt.Errorf("must be a percentage like 10%% or a quantity like 100Mi")
		}
		if f < 0 || f > 100 {
			return v, false, fmt.Errorf("percentage must be between 0%% and 100%%")
		}
		v.Percentage = f / 100
		return v, f == 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return v, false, fmt.Errorf("must be a percentage like 10%% or a quantity like 100Mi")
	}
	if q.Sign() < 0 {
		return v, false, fmt.Errorf("must be greater than or equal to 0")
	}
	v.Quantity = &q
	return v, q.IsZero(), nil
}

// validate rejects what the manager cannot act on, naming the field.
func (c Config) validate() error {
	var errs []error
	for i, th := range c.Hard {
		errs = append(errs, th.validate(fmt.Sprintf("Hard[%d]", i)))
		if th.GracePeriod != 0 {
			errs = append(errs, fmt.Errorf("Hard[%d].GracePeriod: a hard threshold (%s) must not have one", i, th.Signal))
		}
	}
	for i, th := range c.Soft {
		errs = append(errs, th.validate(fmt.Sprintf("Soft[%d]", i)))
		if th.GracePeriod <= 0 {
			errs = append(errs, fmt.Errorf("Soft[%d].GracePeriod: a soft threshold (%s) needs a positive one, got %v", i, th.Signal, th.GracePeriod))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PressureTransitionPeriod", c.PressureTransitionPeriod},
		{"MonitoringInterval", c.MonitoringInterval},
		{"PodCleanupTimeout", c.PodCleanupTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %v", d.name, d.v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

func (t Threshold) validate(name string) error {
	if !t.Signal.Known() {
		return fmt.Errorf("%s.Signal: unknown eviction signal %q", name, t.Signal)
	}
	if err := t.Value.validate(name+".Value", false); err != nil {
		return err
	}
	if t.MinReclaim != nil {
		return t.MinReclaim.validate(name+".MinReclaim", true)
	}
	return nil
}

// validate checks that exactly one of Quantity and Percentage is set and
// in range; a zero Percentage counts as unset unless zeroOK. name is the
// value's field path, for the error.
func (v ThresholdValue) validate(name string, zeroOK bool) error {
	switch {
	case v.Quantity != nil && v.Percentage != 0:
		return fmt.Errorf("%s: set Quantity or Percentage, not both", name)
	case v.Quantity != nil && v.Quantity.Sign() < 0:
		return fmt.Errorf("%s.Quantity: %s must not be negative", name, v.Quantity)
	case v.Quantity != nil:
		return nil
	case v.Percentage < 0 || v.Percentage > 1:
		return fmt.Errorf("%s.Percentage: %v must be a fraction between 0 and 1", name, v.Percentage)
	case v.Percentage == 0 && !zeroOK:
		return fmt.Errorf("%s: needs a Quantity or a Percentage", name)
	}
	return nil
}
