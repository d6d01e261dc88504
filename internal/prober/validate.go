package prober

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/prober/probe"
)

// Probe defaults, as the API server applies them.
const (
	defaultPeriodSeconds    = 10
	defaultTimeoutSeconds   = 1
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

func fieldPath(list string, i int) string { return list + "[" + strconv.Itoa(i) + "]" }

func probeField(k Kind) string {
	switch k {
	case Liveness:
		return "livenessProbe"
	case Readiness:
		return "readinessProbe"
	}
	return "startupProbe"
}

// withDefaults returns a copy of p with zero fields set to their defaults.
func withDefaults(p *v1.Probe) v1.Probe {
	d := *p
	if d.PeriodSeconds == 0 {
		d.PeriodSeconds = defaultPeriodSeconds
	}
	if d.TimeoutSeconds == 0 {
		d.TimeoutSeconds = defaultTimeoutSeconds
	}
	if d.SuccessThreshold == 0 {
		d.SuccessThreshold = defaultSuccessThreshold
	}
	if d.FailureThreshold == 0 {
		d.FailureThreshold = defaultFailureThreshold
	}
	return d
}

func seconds(n int32) time.Duration { return time.Duration(n) * time.Second }

// validatePod checks every probe of pod, collecting all problems.
func validatePod(pod *v1.Pod) error {
	var errs []error
	for _, pc := range probedContainers(pod) {
		for _, k := range []Kind{Liveness, Readiness, Startup} {
			p := probeOf(pc.c, k)
			if p == nil {
				continue
			}
			path := pc.path + "." + probeField(k)
			for _, e := range validateProbe(p, k, pc.c) {
				errs = append(errs, fmt.Errorf("%s.%s", path, e))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("pod %s/%s: invalid probes: %w: %w", pod.Namespace, pod.Name, errors.Join(errs...), errdefs.ErrInvalidArgument)
}

// validateProbe returns one error per bad field, each starting with the
// field's name relative to the probe.
func validateProbe(p *v1.Probe, k Kind, c *v1.Container) []string {
	var bad []string
	nonNeg := func(name string, v int32) {
		if v < 0 {
			bad = append(bad, fmt.Sprintf("%s: must not be negative, got %d", name, v))
		}
	}
	nonNeg("initialDelaySeconds", p.InitialDelaySeconds)
	nonNeg("periodSeconds", p.PeriodSeconds)
	nonNeg("timeoutSeconds", p.TimeoutSeconds)
	nonNeg("successThreshold", p.SuccessThreshold)
	nonNeg("failureThreshold", p.FailureThreshold)
	if k != Readiness && p.SuccessThreshold > 1 {
		bad = append(bad, fmt.Sprintf("successThreshold: must be 1 for %s probes, got %d", k, p.SuccessThreshold))
	}
	if k == Readiness && p.TerminationGracePeriodSeconds != nil {
		bad = append(bad, "terminationGracePeriodSeconds: must not be set for readiness probes")
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		bad = append(bad, fmt.Sprintf("terminationGracePeriodSeconds: must be positive, got %d", *g))
	}
	handlers := 0
	if p.Exec != nil {
		handlers++
		if len(p.Exec.Command) == 0 {
			bad = append(bad, "exec.command: must not be empty")
		}
	}
	if p.HTTPGet != nil {
		handlers++
		if _, err := probe.ResolvePort(p.HTTPGet.Port, c); err != nil {
			bad = append(bad, "httpGet.port: "+err.Error())
		}
		if s := p.HTTPGet.Scheme; s != "" && s != v1.URISchemeHTTP && s != v1.URISchemeHTTPS {
			bad = append(bad, fmt.Sprintf("httpGet.scheme: must be HTTP or HTTPS, got %q", s))
		}
	}
	if p.TCPSocket != nil {
		handlers++
		if _, err := probe.ResolvePort(p.TCPSocket.Port, c); err != nil {
			bad = append(bad, "tcpSocket.port: "+err.Error())
		}
	}
	if p.GRPC != nil {
		handlers++
		if p.GRPC.Port <= 0 || p.GRPC.Port > 65535 {
			bad = append(bad, fmt.Sprintf("grpc.port: must be 1-65535, got %d", p.GRPC.Port))
		}
	}
	if handlers != 1 {
		bad = append(bad, fmt.Sprintf("handler: exactly one of exec, httpGet, tcpSocket, grpc must be set, got %d", handlers))
	}
	return bad
}
