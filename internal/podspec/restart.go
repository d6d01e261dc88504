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
// match decides (its action restarts it), else its restart policy.
func RestartsAfterExit(c *v1.Container, pod v1.RestartPolicy, code int32) bool {
	if c != nil {
		for _, r := range c.RestartPolicyRules {
			if r.ExitCodes != nil && exitCodesMatch(r.ExitCodes, code) {
				return r.Action == v1.ContainerRestartRuleActionRestart
			}
		}
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
