// Package probe holds what every probe handler (exec, http, tcp, grpc)
// returns: a Result, a short human-readable output, and an error that
// means "the probe could not be run" rather than "the container is
// unhealthy".
package probe

// Result is the outcome of one probe run.
type Result int

// The outcomes, as the kubelet names them.
const (
	// Unknown means the handler could not decide (for example a bad request).
	Unknown Result = iota
	// Success means the container answered as healthy.
	Success
	// Warning is a success that deserves a ProbeWarning event (an HTTP
	// redirect to another host that was not followed).
	Warning
	// Failure means the container answered as unhealthy or not at all.
	Failure
)

// String returns the kubelet's word for the result.
func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Warning:
		return "warning"
	case Failure:
		return "failure"
	default:
		return "unknown"
	}
}

// MaxOutput is the most output (exec stdout+stderr, HTTP body) a probe
// keeps: 10 KiB, as the kubelet.
const MaxOutput = 10 * 1024

// UserAgent is sent by HTTP and gRPC probes: kube-probe/<major>.<minor> of
// the Kubernetes API this agent implements.
const UserAgent = "kube-probe/1.37"

// Truncate cuts b to MaxOutput bytes.
func Truncate(b []byte) []byte {
	if len(b) > MaxOutput {
		return b[:MaxOutput]
	}
	return b
}
