package kuberuntime

import (
	"fmt"
	"math"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// errNoAPIServer explains why configMap and secret references fail.
const errNoAPIServer = "standalone mode has no API server to read it from"

// makeEnv builds the container's environment in the kubelet's order:
// envFrom first, then env, each value expanded with $(VAR) against the
// variables defined before it.
func (m *Manager) makeEnv(pod *v1.Pod, c *v1.Container, podIP string) ([]*runtimeapi.KeyValue, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				continue
			}
			return nil, fmt.Errorf("configmap %q: %s: %w", from.ConfigMapRef.Name, errNoAPIServer, errdefs.ErrNotFound)
		case from.SecretRef != nil:
			if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				continue
			}
			return nil, fmt.Errorf("secret %q: %s: %w", from.SecretRef.Name, errNoAPIServer, errdefs.ErrNotFound)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := m.envValueFrom(pod, c, e, podIP)
		if err != nil {
			return nil, fmt.Errorf("env %q of container %q: %w", e.Name, c.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]*runtimeapi.KeyValue, 0, len(order))
	for _, k := range order {
		out = append(out, &runtimeapi.KeyValue{Key: k, Value: []byte(vars[k])})
	}
	return out, nil
}

func (m *Manager) envValueFrom(pod *v1.Pod, c *v1.Container, e v1.EnvVar, podIP string) (string, bool, error) {
	from := e.ValueFrom
	switch {
	case from.FieldRef != nil:
		v, err := m.fieldValue(pod, from.FieldRef.FieldPath, podIP)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := m.resourceValue(pod, c, from.ResourceFieldRef)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		if from.ConfigMapKeyRef.Optional != nil && *from.ConfigMapKeyRef.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %q: %s: %w", from.ConfigMapKeyRef.Name, errNoAPIServer, errdefs.ErrNotFound)
	case from.SecretKeyRef != nil:
		if from.SecretKeyRef.Optional != nil && *from.SecretKeyRef.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secret %q: %s: %w", from.SecretKeyRef.Name, errNoAPIServer, errdefs.ErrNotFound)
	}
	return "", false, fmt.Errorf("valueFrom names no source: %w", errdefs.ErrInvalidArgument)
}

func (m *Manager) fieldValue(pod *v1.Pod, path, podIP string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return m.cfg.HostIP, nil
	case "status.podIP", "status.podIPs":
		if podIP == "" && pod.Spec.HostNetwork {
			return m.cfg.HostIP, nil
		}
		return podIP, nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q: %w", path, errdefs.ErrInvalidArgument)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// resourceValue answers a resourceFieldRef; a limit left unset is the
// node's allocatable amount, as in the kubelet.
func (m *Manager) resourceValue(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		target = nil
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == ref.ContainerName {
				target = &pod.Spec.Containers[i]
			}
		}
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef names unknown container %q: %w", ref.ContainerName, errdefs.ErrInvalidArgument)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resourceFieldRef %q: %w", ref.Resource, errdefs.ErrInvalidArgument)
	}
	res := v1.ResourceName(name)
	list := target.Resources.Requests
	if kind == "limits" {
		list = target.Resources.Limits
	}
	q, set := list[res]
	if !set && kind == "limits" {
		q, set = m.allocatable(res)
	}
	if !set {
		q = resource.Quantity{}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	switch res {
	case v1.ResourceCPU:
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))), nil
	case v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))), nil
	}
	return "", fmt.Errorf("unsupported resource %q in resourceFieldRef: %w", ref.Resource, errdefs.ErrInvalidArgument)
}

func (m *Manager) allocatable(name v1.ResourceName) (resource.Quantity, bool) {
	if q, ok := m.cfg.NodeAllocatable[name]; ok {
		return q, true
	}
	switch name {
	case v1.ResourceCPU:
		return *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI), true
	case v1.ResourceMemory:
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err == nil {
			return *resource.NewQuantity(int64(si.Totalram)*int64(si.Unit), resource.BinarySI), true
		}
	}
	return resource.Quantity{}, false
}

// expand replaces $(NAME) with the variable's value as the kubelet does:
// $$ is a literal $, and a reference to an unknown variable (or an
// unterminated one) stays as written.
func expand(in string, vars map[string]string) string {
	if !strings.Contains(in, "$") {
		return in
	}
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		if in[i] != '$' || i+1 >= len(in) {
			b.WriteByte(in[i])
			continue
		}
		switch next := in[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(in[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := in[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}
