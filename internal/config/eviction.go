package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// parseEviction turns evictionHard, evictionSoft, evictionSoftGracePeriod
// and evictionMinimumReclaim into thresholds. A zero threshold ("0" or
// "0%") disables its signal and is left out. Results are sorted by signal.
func parseEviction(kc *kubeletv1beta1.KubeletConfiguration) (hard, soft []Threshold, errs field.ErrorList) {
	reclaim := map[Signal]*ThresholdValue{}
	for _, sig := range sortedKeys(kc.EvictionMinimumReclaim) {
		p := field.NewPath("evictionMinimumReclaim").Key(sig)
		if !knownSignals[Signal(sig)] {
			errs = append(errs, unknownSignal(p, sig))
			continue
		}
		v, disabled, err := ParseThresholdValue(kc.EvictionMinimumReclaim[sig])
		if err != nil {
			errs = append(errs, field.Invalid(p, kc.EvictionMinimumReclaim[sig], err.Error()))
			continue
		}
		if !disabled {
			reclaim[Signal(sig)] = &v
		}
	}

	hard, herrs := parseThresholds(kc.EvictionHard, field.NewPath("evictionHard"), reclaim)
	errs = append(errs, herrs...)
	soft, serrs := parseThresholds(kc.EvictionSoft, field.NewPath("evictionSoft"), reclaim)
	errs = append(errs, serrs...)

	graceP := field.NewPath("evictionSoftGracePeriod")
	for i := range soft {
		sig := string(soft[i].Signal)
		g, ok := kc.EvictionSoftGracePeriod[sig]
		if !ok {
			errs = append(errs, field.Required(graceP.Key(sig), "a soft eviction threshold needs a grace period"))
			continue
		}
		d, err := time.ParseDuration(g)
		if err != nil || d < 0 {
			errs = append(errs, field.Invalid(graceP.Key(sig), g, "must be a non-negative duration, e.g. 1m30s"))
			continue
		}
		soft[i].GracePeriod = d
	}
	for _, sig := range sortedKeys(kc.EvictionSoftGracePeriod) {
		if _, ok := kc.EvictionSoft[sig]; !ok {
			errs = append(errs, field.Invalid(graceP.Key(sig), kc.EvictionSoftGracePeriod[sig], "has no matching evictionSoft threshold"))
		}
	}
	return hard, soft, errs
}

func parseThresholds(m map[string]string, p *field.Path, reclaim map[Signal]*ThresholdValue) ([]Threshold, field.ErrorList) {
	var out []Threshold
	var errs field.ErrorList
	for _, sig := range sortedKeys(m) {
		kp := p.Key(sig)
		if !knownSignals[Signal(sig)] {
			errs = append(errs, unknownSignal(kp, sig))
			continue
		}
		v, disabled, err := ParseThresholdValue(m[sig])
		if err != nil {
			errs = append(errs, field.Invalid(kp, m[sig], err.Error()))
			continue
		}
		if disabled {
			continue
		}
		out = append(out, Threshold{Signal: Signal(sig), Value: v, MinReclaim: reclaim[Signal(sig)]})
	}
	return out, errs
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

func unknownSignal(p *field.Path, sig string) *field.Error {
	known := make([]string, 0, len(knownSignals))
	for s := range knownSignals {
		known = append(known, string(s))
	}
	sort.Strings(known)
	return field.NotSupported(p, sig, known)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
