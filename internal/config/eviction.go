package config

import (
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/minilet/minilet/internal/eviction"
)

// parseEviction turns evictionHard, evictionSoft, evictionSoftGracePeriod
// and evictionMinimumReclaim into thresholds. A zero threshold ("0" or
// "0%") disables its signal and is left out. Results are sorted by signal.
func parseEviction(kc *kubeletv1beta1.KubeletConfiguration) (hard, soft []eviction.Threshold, errs field.ErrorList) {
	reclaim := map[eviction.Signal]*eviction.ThresholdValue{}
	for _, sig := range slices.Sorted(maps.Keys(kc.EvictionMinimumReclaim)) {
		p := field.NewPath("evictionMinimumReclaim").Key(sig)
		if !eviction.Signal(sig).Known() {
			errs = append(errs, unknownSignal(p, sig))
			continue
		}
		v, disabled, err := eviction.ParseThresholdValue(kc.EvictionMinimumReclaim[sig])
		if err != nil {
			errs = append(errs, field.Invalid(p, kc.EvictionMinimumReclaim[sig], err.Error()))
			continue
		}
		if !disabled {
			reclaim[eviction.Signal(sig)] = &v
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
	for _, sig := range slices.Sorted(maps.Keys(kc.EvictionSoftGracePeriod)) {
		if _, ok := kc.EvictionSoft[sig]; !ok {
			errs = append(errs, field.Invalid(graceP.Key(sig), kc.EvictionSoftGracePeriod[sig], "has no matching evictionSoft threshold"))
		}
	}
	return hard, soft, errs
}

func parseThresholds(m map[string]string, p *field.Path, reclaim map[eviction.Signal]*eviction.ThresholdValue) ([]eviction.Threshold, field.ErrorList) {
	var out []eviction.Threshold
	var errs field.ErrorList
	for _, sig := range slices.Sorted(maps.Keys(m)) {
		kp := p.Key(sig)
		if !eviction.Signal(sig).Known() {
			errs = append(errs, unknownSignal(kp, sig))
			continue
		}
		v, disabled, err := eviction.ParseThresholdValue(m[sig])
		if err != nil {
			errs = append(errs, field.Invalid(kp, m[sig], err.Error()))
			continue
		}
		if disabled {
			continue
		}
		out = append(out, eviction.Threshold{Signal: eviction.Signal(sig), Value: v, MinReclaim: reclaim[eviction.Signal(sig)]})
	}
	return out, errs
}

func unknownSignal(p *field.Path, sig string) *field.Error {
	return field.NotSupported(p, sig, eviction.Signals())
}
