package podsource

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateMetadata applies the API server's limits on a pod's metadata,
// which a standalone node has no API server to apply: label keys and
// values (qualified names, values of at most 63 characters) and
// annotations (qualified keys, 256 KiB in total). It runs on the pod as
// decoded, before it is hashed and named, so an oversize pod costs no more
// work. Name and namespace syntax are checked by podspec.Validate.
func validateMetadata(pod *v1.Pod) field.ErrorList {
	meta := field.NewPath("metadata")
	errs := metav1validation.ValidateLabels(pod.Labels, meta.Child("labels"))
	errs = append(errs, apivalidation.ValidateAnnotations(pod.Annotations, meta.Child("annotations"))...)
	return shortenValues(errs)
}

// maxShownValue is how much of a bad value an error repeats: enough to
// recognise it, not the whole 70,000 characters of a label that is too long.
const maxShownValue = 64

// shortenValues cuts long string values in errs, which end up in logs and
// Events.
func shortenValues(errs field.ErrorList) field.ErrorList {
	for _, e := range errs {
		if s, ok := e.BadValue.(string); ok && len(s) > maxShownValue {
			e.BadValue = fmt.Sprintf("%s... (%d characters)", s[:maxShownValue], len(s))
		}
	}
	return errs
}
