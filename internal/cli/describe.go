package cli

import (
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// timeFormat is how describe prints absolute times, as kubectl does.
const timeFormat = time.RFC1123Z

func newDescribeCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe pod|node",
		Short: "Show details of a pod or the node, like kubectl describe",
	}
	var namespace string
	pod := &cobra.Command{
		Use:     "pod NAME",
		Aliases: []string{"pods", "po"},
		Short:   "Show a pod's details and events",
		Long: "Show a pod's details and events. NAME is matched exactly in the namespace;\n" +
			"when no pod has that name, a unique pod whose name starts with NAME is used,\n" +
			"so `describe pod web` finds the static pod `web-node1`.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, p, err := e.findPod(cmd, namespace, args[0])
			if err != nil {
				return err
			}
			var evs v1.EventList
			q := url.Values{"pod": {p.Namespace + "/" + p.Name}}
			if err := c.getJSON(cmd.Context(), "/events?"+q.Encode(), &evs); err != nil && !errdefs.IsNotFound(err) {
				return err
			}
			return describePod(cmd.OutOrStdout(), p, evs.Items, e.now())
		},
	}
	pod.Flags().StringVarP(&namespace, "namespace", "n", "default", "the pod's namespace")

	node := &cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes", "no"},
		Short:   "Show the node's conditions, addresses, capacity and allocatable",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := e.client(cmd)
			if err != nil {
				return err
			}
			var n v1.Node
			if err := c.getJSON(cmd.Context(), "/node", &n); err != nil {
				return err
			}
			return describeNode(cmd.OutOrStdout(), &n)
		},
	}
	cmd.AddCommand(pod, node)
	return cmd
}

// findPod connects to the agent and finds a pod as resolvePod does.
func (e *env) findPod(cmd *cobra.Command, namespace, name string) (*client, *v1.Pod, error) {
	c, err := e.client(cmd)
	if err != nil {
		return nil, nil, err
	}
	var list v1.PodList
	if err := c.getJSON(cmd.Context(), "/pods", &list); err != nil {
		return nil, nil, err
	}
	p, err := resolvePod(list.Items, namespace, name)
	if err != nil {
		return nil, nil, err
	}
	return c, p, nil
}

// isStaticPodOf reports whether p is the static pod of manifest name on
// its node: the kubelet names it NAME-NODENAME.
func isStaticPodOf(p *v1.Pod, name string) bool {
	return p.Spec.NodeName != "" && p.Name == name+"-"+p.Spec.NodeName
}

// resolvePod finds the pod named name in namespace; when none has exactly
// that name, the static pod of manifest name (NAME-NODENAME); else the one
// pod whose name starts with name. Zero or several
// prefix matches are errors naming the candidates.
func resolvePod(pods []v1.Pod, namespace, name string) (*v1.Pod, error) {
	var prefixed, static []*v1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Namespace != namespace {
			continue
		}
		if p.Name == name {
			return p, nil
		}
		if isStaticPodOf(p, name) {
			static = append(static, p)
		}
		if strings.HasPrefix(p.Name, name) {
			prefixed = append(prefixed, p)
		}
	}
	if len(static) == 1 { // the manifest's name: NAME-NODENAME
		return static[0], nil
	}
	switch len(prefixed) {
	case 0:
		return nil, fmt.Errorf("pod %q not found in namespace %q: %w", name, namespace, errdefs.ErrNotFound)
	case 1:
		return prefixed[0], nil
	default:
		names := make([]string, len(prefixed))
		for i, p := range prefixed {
			names[i] = p.Name
		}
		sort.Strings(names)
		return nil, fmt.Errorf("pod %q not found in namespace %q and several pods start with it: %s: %w",
			name, namespace, strings.Join(names, ", "), errdefs.ErrInvalidArgument)
	}
}

// describer writes "Key:\tvalue" lines at indentation levels through a
// tabwriter, as kubectl describe does.
type describer struct {
	tw *tabwriter.Writer
}

func (d *describer) line(level int, format string, args ...any) {
	_, _ = fmt.Fprintf(d.tw, strings.Repeat("  ", level)+format+"\n", args...)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return t.Format(timeFormat)
}

// describeMap prints a map as "k=v" lines, or <none>; sep is "=" for labels
// and ": " for annotations.
func (d *describer) describeMap(level int, key string, m map[string]string, sep string) {
	if len(m) == 0 {
		d.line(level, "%s:\t<none>", key)
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i == 0 {
			d.line(level, "%s:\t%s%s%s", key, k, sep, m[k])
		} else {
			d.line(level, "\t%s%s%s", k, sep, m[k])
		}
	}
}

func describePod(w io.Writer, pod *v1.Pod, events []v1.Event, now time.Time) error {
	d := &describer{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	d.line(0, "Name:\t%s", pod.Name)
	d.line(0, "Namespace:\t%s", pod.Namespace)
	if pod.Spec.Priority != nil {
		d.line(0, "Priority:\t%d", *pod.Spec.Priority)
	}
	node := orNone(pod.Spec.NodeName)
	if pod.Status.HostIP != "" {
		node += "/" + pod.Status.HostIP
	}
	d.line(0, "Node:\t%s", node)
	if pod.Status.StartTime != nil {
		d.line(0, "Start Time:\t%s", formatTime(pod.Status.StartTime.Time))
	}
	d.describeMap(0, "Labels", pod.Labels, "=")
	d.describeMap(0, "Annotations", pod.Annotations, ": ")
	status := string(pod.Status.Phase)
	if pod.DeletionTimestamp != nil {
		status = fmt.Sprintf("Terminating (lasts %s)", age(pod.DeletionTimestamp.Time, now))
	}
	d.line(0, "Status:\t%s", status)
	if pod.Status.Reason != "" {
		d.line(0, "Reason:\t%s", pod.Status.Reason)
	}
	if pod.Status.Message != "" {
		d.line(0, "Message:\t%s", strings.TrimSpace(pod.Status.Message))
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		d.line(0, "SeccompProfile:\t%s", sc.SeccompProfile.Type)
		if sc.SeccompProfile.Type == v1.SeccompProfileTypeLocalhost && sc.SeccompProfile.LocalhostProfile != nil {
			d.line(0, "LocalhostProfile:\t%s", *sc.SeccompProfile.LocalhostProfile)
		}
	}
	d.line(0, "IP:\t%s", pod.Status.PodIP)
	if len(pod.Spec.InitContainers) > 0 {
		d.line(0, "Init Containers:")
		d.describeContainers(pod.Spec.InitContainers, pod.Status.InitContainerStatuses)
	}
	d.line(0, "Containers:")
	d.describeContainers(pod.Spec.Containers, pod.Status.ContainerStatuses)
	if len(pod.Status.Conditions) > 0 {
		d.line(0, "Conditions:")
		d.line(1, "Type\tStatus")
		for _, c := range pod.Status.Conditions {
			d.line(1, "%s \t%s", c.Type, c.Status)
		}
	}
	d.describeVolumes(pod.Spec.Volumes)
	d.line(0, "QoS Class:\t%s", qosClass(pod))
	d.describeMap(0, "Node-Selectors", pod.Spec.NodeSelector, "=")
	d.describeEvents(events, now)
	return d.tw.Flush()
}

func (d *describer) describeContainers(specs []v1.Container, statuses []v1.ContainerStatus) {
	byName := map[string]v1.ContainerStatus{}
	for _, s := range statuses {
		byName[s.Name] = s
	}
	for _, c := range specs {
		s, ok := byName[c.Name]
		d.line(1, "%s:", c.Name)
		if ok && s.ContainerID != "" {
			d.line(2, "Container ID:\t%s", s.ContainerID)
		}
		d.line(2, "Image:\t%s", c.Image)
		if ok && s.ImageID != "" {
			d.line(2, "Image ID:\t%s", s.ImageID)
		}
		for _, p := range c.Ports {
			d.line(2, "Port:\t%d/%s", p.ContainerPort, orDefault(string(p.Protocol), "TCP"))
		}
		if len(c.Command) > 0 {
			d.line(2, "Command:\t%s", strings.Join(c.Command, " "))
		}
		if len(c.Args) > 0 {
			d.line(2, "Args:\t%s", strings.Join(c.Args, " "))
		}
		if ok {
			d.describeState("State", s.State)
			if s.LastTerminationState.Terminated != nil || s.LastTerminationState.Running != nil || s.LastTerminationState.Waiting != nil {
				d.describeState("Last State", s.LastTerminationState)
			}
			d.line(2, "Ready:\t%s", boolWord(s.Ready))
			d.line(2, "Restart Count:\t%d", s.RestartCount)
		} else {
			d.line(2, "State:\tWaiting")
			d.line(2, "Ready:\tFalse")
			d.line(2, "Restart Count:\t0")
		}
		d.describeResources("Limits", c.Resources.Limits)
		d.describeResources("Requests", c.Resources.Requests)
		if c.StartupProbe != nil {
			d.line(2, "Startup:\t%s", describeProbe(c.StartupProbe))
		}
		if c.LivenessProbe != nil {
			d.line(2, "Liveness:\t%s", describeProbe(c.LivenessProbe))
		}
		if c.ReadinessProbe != nil {
			d.line(2, "Readiness:\t%s", describeProbe(c.ReadinessProbe))
		}
		if len(c.Env) == 0 {
			d.line(2, "Environment:\t<none>")
		} else {
			d.line(2, "Environment:")
			for _, e := range c.Env {
				v := e.Value
				if e.ValueFrom != nil {
					v = "<set from a reference>"
				}
				d.line(3, "%s:\t%s", e.Name, v)
			}
		}
		d.describeMounts(c.VolumeMounts)
	}
}

// boolWord prints a bool as kubectl describe does: True or False.
func boolWord(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (d *describer) describeState(key string, st v1.ContainerState) {
	switch {
	case st.Running != nil:
		d.line(2, "%s:\tRunning", key)
		d.line(3, "Started:\t%s", formatTime(st.Running.StartedAt.Time))
	case st.Waiting != nil:
		d.line(2, "%s:\tWaiting", key)
		if st.Waiting.Reason != "" {
			d.line(3, "Reason:\t%s", st.Waiting.Reason)
		}
		if st.Waiting.Message != "" {
			d.line(3, "Message:\t%s", st.Waiting.Message)
		}
	case st.Terminated != nil:
		t := st.Terminated
		d.line(2, "%s:\tTerminated", key)
		if t.Reason != "" {
			d.line(3, "Reason:\t%s", t.Reason)
		}
		if t.Message != "" {
			d.line(3, "Message:\t%s", t.Message)
		}
		d.line(3, "Exit Code:\t%d", t.ExitCode)
		if t.Signal != 0 {
			d.line(3, "Signal:\t%d", t.Signal)
		}
		d.line(3, "Started:\t%s", formatTime(t.StartedAt.Time))
		d.line(3, "Finished:\t%s", formatTime(t.FinishedAt.Time))
	default:
		d.line(2, "%s:\tWaiting", key)
	}
}

func (d *describer) describeResources(key string, l v1.ResourceList) {
	if len(l) == 0 {
		return
	}
	names := make([]string, 0, len(l))
	for k := range l {
		names = append(names, string(k))
	}
	sort.Strings(names)
	d.line(2, "%s:", key)
	for _, n := range names {
		q := l[v1.ResourceName(n)]
		d.line(3, "%s:\t%s", n, q.String())
	}
}

// describeProbe prints a probe as kubectl does, e.g.
// "http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3".
func describeProbe(p *v1.Probe) string {
	var what string
	switch {
	case p.Exec != nil:
		what = fmt.Sprintf("exec %v", p.Exec.Command)
	case p.HTTPGet != nil:
		u := url.URL{Scheme: strings.ToLower(orDefault(string(p.HTTPGet.Scheme), "http")),
			Host: p.HTTPGet.Host + ":" + p.HTTPGet.Port.String(), Path: p.HTTPGet.Path}
		what = "http-get " + u.String()
	case p.TCPSocket != nil:
		what = fmt.Sprintf("tcp-socket %s:%s", p.TCPSocket.Host, p.TCPSocket.Port.String())
	case p.GRPC != nil:
		svc := ""
		if p.GRPC.Service != nil {
			svc = *p.GRPC.Service
		}
		what = fmt.Sprintf("grpc <pod>:%d %s", p.GRPC.Port, svc)
	default:
		what = "unknown"
	}
	timeout, period, success, failure := p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold
	if timeout == 0 {
		timeout = 1
	}
	if period == 0 {
		period = 10
	}
	if success == 0 {
		success = 1
	}
	if failure == 0 {
		failure = 3
	}
	return fmt.Sprintf("%s delay=%ds timeout=%ds period=%ds #success=%d #failure=%d",
		what, p.InitialDelaySeconds, timeout, period, success, failure)
}

// describeEvents prints the Events table: Type Reason Age From Message,
// with "5m (x3 over 10m)" for repeated events.
func (d *describer) describeEvents(evs []v1.Event, now time.Time) {
	if len(evs) == 0 {
		d.line(0, "Events:\t<none>")
		return
	}
	sortEvents(evs)
	d.line(0, "Events:")
	d.line(1, "Type\tReason\tAge\tFrom\tMessage")
	d.line(1, "----\t------\t----\t----\t-------")
	for i := range evs {
		ev := &evs[i]
		first, last := eventTimes(ev)
		a := age(last, now)
		if n := eventCount(ev); n > 1 {
			a = fmt.Sprintf("%s (x%d over %s)", a, n, age(first, now))
		}
		from := ev.Source.Component
		if from == "" {
			from = ev.ReportingController
		}
		d.line(1, "%s\t%s\t%s\t%s\t%s", ev.Type, ev.Reason, a, from, strings.TrimSpace(ev.Message))
	}
}

func describeNode(w io.Writer, n *v1.Node) error {
	d := &describer{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	d.line(0, "Name:\t%s", n.Name)
	d.line(0, "Roles:\t%s", nodeRoles(n))
	d.describeMap(0, "Labels", n.Labels, "=")
	d.describeMap(0, "Annotations", n.Annotations, ": ")
	d.line(0, "CreationTimestamp:\t%s", formatTime(n.CreationTimestamp.Time))
	d.line(0, "Unschedulable:\t%t", n.Spec.Unschedulable)
	d.line(0, "Conditions:")
	d.line(1, "Type\tStatus\tLastHeartbeatTime\tReason\tMessage")
	d.line(1, "----\t------\t-----------------\t------\t-------")
	for _, c := range n.Status.Conditions {
		d.line(1, "%s \t%s \t%s \t%s \t%s", c.Type, c.Status, formatTime(c.LastHeartbeatTime.Time), c.Reason, c.Message)
	}
	d.line(0, "Addresses:")
	for _, a := range n.Status.Addresses {
		d.line(1, "%s:\t%s", a.Type, a.Address)
	}
	d.describeResources0("Capacity", n.Status.Capacity)
	d.describeResources0("Allocatable", n.Status.Allocatable)
	d.line(0, "System Info:")
	info := n.Status.NodeInfo
	d.line(1, "Kernel Version:\t%s", info.KernelVersion)
	d.line(1, "OS Image:\t%s", info.OSImage)
	d.line(1, "Operating System:\t%s", info.OperatingSystem)
	d.line(1, "Architecture:\t%s", info.Architecture)
	d.line(1, "Container Runtime Version:\t%s", info.ContainerRuntimeVersion)
	d.line(1, "Kubelet Version:\t%s", info.KubeletVersion)
	return d.tw.Flush()
}

// describeResources0 prints a resource list at the top level.
func (d *describer) describeResources0(key string, l v1.ResourceList) {
	d.line(0, "%s:", key)
	names := make([]string, 0, len(l))
	for k := range l {
		names = append(names, string(k))
	}
	sort.Strings(names)
	for _, n := range names {
		q := l[v1.ResourceName(n)]
		d.line(1, "%s:\t%s", n, q.String())
	}
}
