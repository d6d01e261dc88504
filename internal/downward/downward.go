// Package downward answers the downward API's questions about a pod, for
// environment variables and downwardAPI volume files alike: fieldRef
// paths (name, namespace, uid, labels, annotations, node, service account,
// IPs) and resourceFieldRef selectors with their divisor.
package downward

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/minilet/minilet/internal/errdefs"
)

// Node is what the pod's fields need from the node: its IP, and the
// allocatable amount that stands for a limit left unset.
type Node struct {
	HostIP      string
	Allocatable func(v1.ResourceName) (resource.Quantity, bool)
}

// Field answers fieldRef path for pod, whose IP is podIP ("" before the
// sandbox has one). Whole-map paths (metadata.labels, .annotations) are
// rendered one `key="value"` line each, sorted, as in volume files.
func Field(pod *v1.Pod, path string, n Node, podIP string) (string, error) {
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
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return n.HostIP, nil
	case "status.podIP", "status.podIPs":
		if podIP == "" && pod.Spec.HostNetwork {
			return n.HostIP, nil
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

// formatMap renders m as sorted `key="value"` lines, values quoted as Go
// strings.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// Resource answers a resourceFieldRef for container c of pod (ref may name
// another container). A limit left unset is the node's allocatable amount,
// as in the kubelet; values are divided by the divisor and rounded up.
func Resource(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector, n Node) (string, error) {
	target := c
	if ref.ContainerName != "" && (c == nil || ref.ContainerName != c.Name) {
		target = nil
		for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
			for i := range list {
				if list[i].Name == ref.ContainerName {
					target = &list[i]
				}
			}
		}
	}
	if target == nil {
		return "", fmt.Errorf("resourceFieldRef names unknown container %q: %w", ref.ContainerName, errdefs.ErrInvalidArgument)
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
	if !set && kind == "limits" && n.Allocatable != nil {
		q, set = n.Allocatable(res)
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
