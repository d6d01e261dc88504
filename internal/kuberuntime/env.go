package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/downward"
	"github.com/minilet/minilet/internal/errdefs"
)

// errNoAPIServer explains why configMap and secret references fail.
const errNoAPIServer = "standalone mode has no API server to read it from"

// makeEnv builds the container's environment in the kubelet's order:
// envFrom first, then env, each value expanded with $(VAR) against the
// variables defined before it.
func (m *Manager) makeEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, podIP string) ([]*runtimeapi.KeyValue, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, from := range c.EnvFrom {
		data, err := m.envFromData(ctx, pod, from)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var invalid []string
		for _, k := range keys {
			name := from.Prefix + k
			if len(validation.IsEnvVarName(name)) > 0 {
				invalid = append(invalid, name)
				continue
			}
			set(name, data[k])
		}
		if len(invalid) > 0 {
			m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "InvalidEnvironmentVariableNames",
				"Keys [%s] from the EnvFrom %s were skipped since they are considered invalid environment variable names.", strings.Join(invalid, ", "), envFromName(from))
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := m.envValueFrom(ctx, pod, c, e, podIP)
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

func (m *Manager) envValueFrom(ctx context.Context, pod *v1.Pod, c *v1.Container, e v1.EnvVar, podIP string) (string, bool, error) {
	from := e.ValueFrom
	switch {
	case from.FieldRef != nil:
		v, err := downward.Field(pod, from.FieldRef.FieldPath, m.node(), podIP)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := downward.Resource(pod, c, from.ResourceFieldRef, m.node())
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		return m.keyValue(ctx, "ConfigMap", pod.Namespace, ref.Name, ref.Key, isTrue(ref.Optional))
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		return m.keyValue(ctx, "Secret", pod.Namespace, ref.Name, ref.Key, isTrue(ref.Optional))
	}
	return "", false, fmt.Errorf("valueFrom names no source: %w", errdefs.ErrInvalidArgument)
}

// objectData reads a ConfigMap's or Secret's data; found is false (and
// err nil) for a missing optional one.
func (m *Manager) objectData(ctx context.Context, kind, ns, name string, optional bool) (data map[string]string, found bool, err error) {
	lower := strings.ToLower(kind)
	if m.cfg.Objects == nil {
		if optional {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("%s %q: %s: %w", lower, name, errNoAPIServer, errdefs.ErrNotFound)
	}
	data = map[string]string{}
	switch kind {
	case "ConfigMap":
		cm, gerr := m.cfg.Objects.ConfigMap(ctx, ns, name)
		if err = gerr; err == nil {
			maps.Copy(data, cm.Data)
			for k, v := range cm.BinaryData {
				data[k] = string(v)
			}
		}
	default:
		s, gerr := m.cfg.Objects.Secret(ctx, ns, name)
		if err = gerr; err == nil {
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
	}
	if err != nil {
		if optional && errors.Is(err, errdefs.ErrNotFound) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("%s %q: %w", lower, name, err)
	}
	return data, true, nil
}

// keyValue is one key of a ConfigMap or Secret, as configMapKeyRef and
// secretKeyRef ask; a missing key fails with the kubelet's message unless
// optional.
func (m *Manager) keyValue(ctx context.Context, kind, ns, name, key string, optional bool) (string, bool, error) {
	data, found, err := m.objectData(ctx, kind, ns, name, optional)
	if err != nil || !found {
		return "", false, err
	}
	v, ok := data[key]
	if !ok {
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in %s %s/%s: %w", key, kind, ns, name, errdefs.ErrNotFound)
	}
	return v, true, nil
}

// envFromData is the data an envFrom source adds (nil for a missing
// optional one).
func (m *Manager) envFromData(ctx context.Context, pod *v1.Pod, from v1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		d, _, err := m.objectData(ctx, "ConfigMap", pod.Namespace, from.ConfigMapRef.Name, isTrue(from.ConfigMapRef.Optional))
		return d, err
	case from.SecretRef != nil:
		d, _, err := m.objectData(ctx, "Secret", pod.Namespace, from.SecretRef.Name, isTrue(from.SecretRef.Optional))
		return d, err
	}
	return nil, nil
}

func envFromName(from v1.EnvFromSource) string {
	if from.ConfigMapRef != nil {
		return "configMap " + from.ConfigMapRef.Name
	}
	if from.SecretRef != nil {
		return "secret " + from.SecretRef.Name
	}
	return "source"
}

// node is what the downward API needs of the node.
func (m *Manager) node() downward.Node {
	return downward.Node{HostIP: m.cfg.HostIP, Allocatable: m.allocatable}
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

func isTrue(b *bool) bool { return b != nil && *b }
