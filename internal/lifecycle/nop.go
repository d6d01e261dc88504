package lifecycle

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

type nopRecorder struct{}

func (nopRecorder) Event(runtime.Object, string, string, string)          {}
func (nopRecorder) Eventf(runtime.Object, string, string, string, ...any) {}

type nopMetrics struct{}

func (nopMetrics) ObserveSync(string, time.Duration) {}
func (nopMetrics) ObservePodStart(time.Duration)     {}
func (nopMetrics) SetCounts(int, map[string]int)     {}
