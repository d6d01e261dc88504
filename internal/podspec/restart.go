package podspec

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// RestartPolicyOf is the restart policy of an app container: its own
// restartPolicy when set (ContainerRestartRules), else the pod's (Always
// when unset).
func RestartPolicyOf(c *v1.Container, pod v1.RestartPolicy) v1.RestartPolicy {
	if c != nil && c.RestartPolicy != nil {
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return v1.RestartPolicyAlways
		case v1.ContainerRestartPolicyOnFailure:
			return v1.RestartPolicyOnFailure
		case v1.ContainerRestartPolicyNever:
			return v1.RestartPolicyNever
		}
	}
	if pod == "" {
		return v1.RestartPolicyAlways
	}
	return pod
}

// RestartsAfterExit says whether an app container that exited with code
// is started again: the first of its restartPolicyRules whose exit codes
// match decides (its action restarts it, alone or with every container of
// the pod), else its restart policy.
func RestartsAfterExit(c *v1.Container, pod v1.RestartPolicy, code int32) bool {
	if r := matchingRule(c, code); r != nil {
		return r.Action == v1.ContainerRestartRuleActionRestart || r.Action == v1.ContainerRestartRuleActionRestartAllContainers
	}
	switch RestartPolicyOf(c, pod) {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return code != 0
	default:
		return true
	}
}

// RestartsAllAfterExit says whether container c (app or init) exiting
// with code restarts every container of its pod in place: the first of
// its restartPolicyRules whose exit codes match has the action
// RestartAllContainers (RestartAllContainersOnContainerExits, beta and on
// in 1.37).
func RestartsAllAfterExit(c *v1.Container, code int32) bool {
	r := matchingRule(c, code)
	return r != nil && r.Action == v1.ContainerRestartRuleActionRestartAllContainers
}

// matchingRule is the first of c's restartPolicyRules whose exit codes
// match code, nil when none does.
func matchingRule(c *v1.Container, code int32) *v1.ContainerRestartRule {
	if c == nil {
		return nil
	}
	for i := range c.RestartPolicyRules {
		if r := &c.RestartPolicyRules[i]; r.ExitCodes != nil && exitCodesMatch(r.ExitCodes, code) {
			return r
		}
	}
	return nil
}

func exitCodesMatch(e *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := slices.Contains(e.Values, code)
	switch e.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}

// EphemeralContainers are pod's ephemeral containers (kubectl debug) as
// containers: they run like one, but are started once, never restarted,
// and have no ports, probes, resources or lifecycle hooks (the API server
// refuses them).
func EphemeralContainers(pod *v1.Pod) []v1.Container {
	if len(pod.Spec.EphemeralContainers) == 0 {
		return nil
	}
	out := make([]v1.Container, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		out[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
	}
	return out
}
