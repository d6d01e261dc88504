package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/server"
)

// getFlags are get's kubectl-style flags, shared by its resource types.
type getFlags struct {
	output        string
	namespace     string
	allNamespaces bool
	selector      string
	watch         bool
}

// resourceTypes are get's resource types, for messages.
const resourceTypes = "pods, events, node, devices, images"

func newGetCommand(e *env) *cobra.Command {
	f := &getFlags{}
	cmd := &cobra.Command{
		Use:   "get TYPE [NAME...]",
		Short: "List objects of the agent, like kubectl get (TYPE: " + resourceTypes + ")",
		Long: "List objects of the agent, like kubectl get. Pods and events are listed from\n" +
			"all namespaces unless -n is given. A pod is found by its name or by its\n" +
			"manifest's name (the static pod NAME-NODENAME).",
		Args: cobra.ArbitraryArgs,
		// Reached only when no resource type matched: TYPE/NAME
		// arguments (pod/web), or an unknown type.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("you must specify the type of resource to get: one of %s: %w", resourceTypes, errdefs.ErrInvalidArgument)
			}
			var names []string
			for _, a := range args {
				typ, name, ok := strings.Cut(a, "/")
				if !ok || name == "" {
					if len(names) > 0 || ok {
						return fmt.Errorf("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. 'minilet get pod/web'): %w", errdefs.ErrInvalidArgument)
					}
					return &kubectlError{msg: fmt.Sprintf("the server doesn't have a resource type %q", typ), class: errdefs.ErrNotFound}
				}
				if typ != "pod" && typ != "pods" && typ != "po" {
					return &kubectlError{msg: fmt.Sprintf("the server doesn't have a resource type %q", typ), class: errdefs.ErrNotFound}
				}
				names = append(names, name)
			}
			return e.getPods(cmd, f, names)
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&f.output, "output", "o", "", "output format: wide, name, json or yaml")
	pf.StringVarP(&f.namespace, "namespace", "n", "", "only objects of this namespace (default: all)")
	pf.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "objects of all namespaces (overrides -n)")
	pf.StringVarP(&f.selector, "selector", "l", "", "label selector to filter on, e.g. -l app=web,tier!=db")
	pf.BoolVarP(&f.watch, "watch", "w", false, "after listing, print changes as they happen (polls the agent)")

	pods := &cobra.Command{
		Use:     "pods [NAME...]",
		Aliases: []string{"pod", "po"},
		Short:   "List pods: NAMESPACE NAME READY STATUS RESTARTS AGE (wide: IP NODE)",
		RunE:    func(cmd *cobra.Command, args []string) error { return e.getPods(cmd, f, args) },
	}
	events := &cobra.Command{
		Use:     "events",
		Aliases: []string{"event", "ev"},
		Short:   "List events: LAST SEEN TYPE REASON OBJECT MESSAGE",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return e.getEvents(cmd, f) },
	}

	node := &cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes", "no"},
		Short:   "Show the node: NAME STATUS ROLES AGE VERSION (wide: addresses, OS, capacity/allocatable)",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check("wide", "name"); err != nil {
				return err
			}
			n, err := fetch[v1.Node](cmd, e, "/node", "")
			if err != nil {
				return err
			}
			if len(args) == 1 && args[0] != n.Name {
				return notFound("nodes", args)
			}
			if f.output == "name" {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "node/%s\n", n.Name)
				return err
			}
			return emit(cmd, f.output, n, func() error {
				return printNode(cmd.OutOrStdout(), n, f.output == "wide", e.now())
			})
		},
	}

	devices := &cobra.Command{
		Use:     "devices",
		Aliases: []string{"device", "dev"},
		Short:   "List device-plugin devices: RESOURCE DEVICE HEALTH POD CONTAINER",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			list, err := fetch[server.DeviceList](cmd, e, "/devices", "devices")
			if err != nil || list == nil {
				return err
			}
			return emit(cmd, f.output, list, func() error {
				return printDevices(cmd.OutOrStdout(), cmd.ErrOrStderr(), list.Items)
			})
		},
	}

	images := &cobra.Command{
		Use:     "images",
		Aliases: []string{"image", "img"},
		Short:   "List images: IMAGE ID SIZE LAST USED PINNED",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			list, err := fetch[server.ImageList](cmd, e, "/images", "images")
			if err != nil || list == nil {
				return err
			}
			return emit(cmd, f.output, list, func() error {
				return printImages(cmd.OutOrStdout(), cmd.ErrOrStderr(), list.Items, e.now())
			})
		},
	}
	cmd.AddCommand(pods, events, node, devices, images)
	return cmd
}

// check validates -o against the formats a type supports besides json and
// yaml, and refuses -w, -l and -n where the type does not take them
// (types with more support check those themselves).
func (f *getFlags) check(formats ...string) error {
	if err := checkOutput(f.output, formats...); err != nil {
		return err
	}
	if f.watch && !contains(formats, "name") {
		return fmt.Errorf("-w is not supported for this resource type: %w", errdefs.ErrInvalidArgument)
	}
	if f.selector != "" && !contains(formats, "name") {
		return fmt.Errorf("-l is not supported for this resource type: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// ns is the namespace to filter on; "" for all.
func (f *getFlags) ns() string {
	if f.allNamespaces {
		return ""
	}
	return f.namespace
}

// labelSelector parses -l.
func (f *getFlags) labelSelector() (labels.Selector, error) {
	sel, err := labels.Parse(f.selector)
	if err != nil {
		return nil, fmt.Errorf("invalid label selector %q for -l: %v: %w", f.selector, err, errdefs.ErrInvalidArgument)
	}
	return sel, nil
}

// fetch reads path from the agent into a T. When
// kind is set and the agent answers that the endpoint is off, it says "No
// <kind> found" on stderr and returns a nil T and a nil error: the
// listing is then empty, not failed.
func fetch[T any](cmd *cobra.Command, e *env, path, kind string) (*T, error) {
	c, err := e.client(cmd)
	if err != nil {
		return nil, err
	}
	var obj T
	if err := c.getJSON(cmd.Context(), path, &obj); err != nil {
		if kind != "" && notEnabled(err) {
			_, err = fmt.Fprintf(cmd.ErrOrStderr(), "No %s found (%v).\n", kind, err)
		}
		return nil, err
	}
	return &obj, nil
}

// emit prints obj as JSON or YAML when -o asks for it, else runs table.
func emit(cmd *cobra.Command, output string, obj any, table func() error) error {
	if output == "json" || output == "yaml" {
		return printObject(cmd.OutOrStdout(), output, obj)
	}
	return table()
}

// notEnabled reports whether the agent answered that the endpoint's
// provider is off; listing commands then show an empty list.
func notEnabled(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusNotFound && strings.Contains(apiErr.Message, "not enabled")
}

// filterPods keeps pods of namespace (all when empty) that match sel,
// sorted by namespace and name.
func filterPods(pods []v1.Pod, namespace string, sel labels.Selector) []v1.Pod {
	var out []v1.Pod
	for _, p := range pods {
		if namespace != "" && p.Namespace != namespace {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// pickPods returns, for each name in order, the pods it names: those with
// that exact name or, when there is none, the static pod of that manifest
// (NAME-NODENAME). missing lists the names that found nothing.
func pickPods(pods []v1.Pod, names []string) (found []v1.Pod, missing []string) {
	for _, name := range names {
		var exact, static []v1.Pod
		for i := range pods {
			switch {
			case pods[i].Name == name:
				exact = append(exact, pods[i])
			case isStaticPodOf(&pods[i], name):
				static = append(static, pods[i])
			}
		}
		switch {
		case len(exact) > 0:
			found = append(found, exact...)
		case len(static) > 0:
			found = append(found, static...)
		default:
			missing = append(missing, name)
		}
	}
	return found, missing
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

// row writes tab-separated cells as one table line.
func row(tw io.Writer, cells ...string) {
	_, _ = fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

func printPods(w io.Writer, pods []v1.Pod, wide, withNamespace bool, now time.Time) error {
	if len(pods) == 0 {
		_, err := fmt.Fprintln(w, "No resources found.")
		return err
	}
	tw := newTable(w)
	row(tw, podHeader(wide, withNamespace)...)
	for i := range pods {
		row(tw, podCells(&pods[i], wide, withNamespace, now)...)
	}
	return tw.Flush()
}

func podHeader(wide, withNamespace bool) []string {
	head := []string{"NAME", "READY", "STATUS", "RESTARTS", "AGE"}
	if withNamespace {
		head = append([]string{"NAMESPACE"}, head...)
	}
	if wide {
		head = append(head, "IP", "NODE")
	}
	return head
}

func podCells(p *v1.Pod, wide, withNamespace bool, now time.Time) []string {
	s := summarizePod(p, now)
	cells := []string{p.Name, s.Ready, s.Status, s.Restarts, age(p.CreationTimestamp.Time, now)}
	if withNamespace {
		cells = append([]string{p.Namespace}, cells...)
	}
	if wide {
		cells = append(cells, orNone(p.Status.PodIP), orNone(p.Spec.NodeName))
	}
	return cells
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// eventTimes returns the first and last time an event was seen.
func eventTimes(ev *v1.Event) (first, last time.Time) {
	first, last = ev.FirstTimestamp.Time, ev.LastTimestamp.Time
	if first.IsZero() {
		first = ev.EventTime.Time
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(last) {
		last = ev.Series.LastObservedTime.Time
	}
	if last.IsZero() {
		last = first
	}
	return first, last
}

func eventCount(ev *v1.Event) int32 {
	if ev.Series != nil && ev.Series.Count > ev.Count {
		return ev.Series.Count
	}
	if ev.Count == 0 {
		return 1
	}
	return ev.Count
}

func eventSource(ev *v1.Event) string {
	comp, host := ev.Source.Component, ev.Source.Host
	if comp == "" {
		comp = ev.ReportingController
	}
	if host == "" {
		host = ev.ReportingInstance
	}
	switch {
	case comp == "" && host == "":
		return "<none>"
	case host == "":
		return comp
	default:
		return comp + ", " + host
	}
}

// sortEvents orders events by when they were last seen, oldest first.
func sortEvents(evs []v1.Event) {
	sort.SliceStable(evs, func(i, j int) bool {
		_, a := eventTimes(&evs[i])
		_, b := eventTimes(&evs[j])
		return a.Before(b)
	})
}

func printEvents(w io.Writer, evs []v1.Event, wide bool, now time.Time) error {
	if len(evs) == 0 {
		_, err := fmt.Fprintln(w, "No events found.")
		return err
	}
	sortEvents(evs)
	tw := newTable(w)
	row(tw, eventHeader(wide)...)
	for i := range evs {
		row(tw, eventCells(&evs[i], wide, now)...)
	}
	return tw.Flush()
}

func eventHeader(wide bool) []string {
	if wide {
		return []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE", "FIRST SEEN", "COUNT", "NAME"}
	}
	return []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}
}

func eventCells(ev *v1.Event, wide bool, now time.Time) []string {
	first, last := eventTimes(ev)
	obj := strings.ToLower(ev.InvolvedObject.Kind) + "/" + ev.InvolvedObject.Name
	msg := strings.TrimSpace(ev.Message)
	if wide {
		return []string{age(last, now), ev.Type, ev.Reason, obj, ev.InvolvedObject.FieldPath, eventSource(ev), msg,
			age(first, now), fmt.Sprint(eventCount(ev)), ev.Name}
	}
	return []string{age(last, now), ev.Type, ev.Reason, obj, msg}
}

// nodeStatus is "Ready", "NotReady" or "Unknown", with
// ",SchedulingDisabled" when cordoned.
func nodeStatus(n *v1.Node) string {
	s := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			if c.Status == v1.ConditionTrue {
				s = "Ready"
			} else {
				s = "NotReady"
			}
		}
	}
	if n.Spec.Unschedulable {
		s += ",SchedulingDisabled"
	}
	return s
}

func nodeRoles(n *v1.Node) string {
	var roles []string
	for k := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	if len(roles) == 0 {
		return "<none>"
	}
	sort.Strings(roles)
	return strings.Join(roles, ",")
}

func nodeAddress(n *v1.Node, t v1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func printNode(w io.Writer, n *v1.Node, wide bool, now time.Time) error {
	tw := newTable(w)
	head := []string{"NAME", "STATUS", "ROLES", "AGE", "VERSION"}
	cells := []string{n.Name, nodeStatus(n), nodeRoles(n), age(n.CreationTimestamp.Time, now), orNone(n.Status.NodeInfo.KubeletVersion)}
	if wide {
		head = append(head, "INTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME")
		cells = append(cells, nodeAddress(n, v1.NodeInternalIP), orNone(n.Status.NodeInfo.OSImage),
			orNone(n.Status.NodeInfo.KernelVersion), orNone(n.Status.NodeInfo.ContainerRuntimeVersion))
	}
	row(tw, head...)
	row(tw, cells...)
	if err := tw.Flush(); err != nil {
		return err
	}
	if !wide {
		return nil
	}
	_, _ = fmt.Fprintln(w)
	return printResourceTable(w, n.Status.Capacity, n.Status.Allocatable)
}

// printResourceTable prints RESOURCE CAPACITY ALLOCATABLE, one line per
// resource name, sorted.
func printResourceTable(w io.Writer, capacity, allocatable v1.ResourceList) error {
	names := map[v1.ResourceName]bool{}
	for k := range capacity {
		names[k] = true
	}
	for k := range allocatable {
		names[k] = true
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, string(k))
	}
	sort.Strings(sorted)
	tw := newTable(w)
	row(tw, "RESOURCE", "CAPACITY", "ALLOCATABLE")
	for _, k := range sorted {
		row(tw, k, quantity(capacity, k), quantity(allocatable, k))
	}
	return tw.Flush()
}

func quantity(l v1.ResourceList, name string) string {
	q, ok := l[v1.ResourceName(name)]
	if !ok {
		return "-"
	}
	return q.String()
}

func printDevices(w, errw io.Writer, devs []server.Device) error {
	if len(devs) == 0 {
		_, err := fmt.Fprintln(errw, "No devices found.")
		return err
	}
	tw := newTable(w)
	row(tw, "RESOURCE", "DEVICE", "HEALTH", "POD", "CONTAINER")
	for _, d := range devs {
		row(tw, d.Resource, d.ID, d.Health, orNone(d.Pod), orNone(d.Container))
	}
	return tw.Flush()
}

func printImages(w, errw io.Writer, imgs []server.Image, now time.Time) error {
	if len(imgs) == 0 {
		_, err := fmt.Fprintln(errw, "No images found.")
		return err
	}
	tw := newTable(w)
	row(tw, "IMAGE", "ID", "SIZE", "LAST USED", "PINNED")
	for _, im := range imgs {
		name := "<none>"
		if len(im.RepoTags) > 0 {
			name = strings.Join(im.RepoTags, ",")
		}
		id := strings.TrimPrefix(im.ID, "sha256:")
		if len(id) > 12 {
			id = id[:12]
		}
		used := "never"
		if !im.LastUsed.IsZero() {
			used = age(im.LastUsed, now) + " ago"
		}
		pinned := "false"
		if im.Pinned {
			pinned = "true"
		}
		row(tw, name, id, humanBytes(im.Size), used, pinned)
	}
	return tw.Flush()
}

// humanBytes prints a size in binary units, as "512B", "1.5Ki", "12Mi".
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"Ki", "Mi", "Gi", "Ti", "Pi"} {
		if v < unit {
			break
		}
		v /= unit
		suffix = s
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f%s", v, suffix)
	}
	return fmt.Sprintf("%.1f%s", v, suffix)
}

// writeIndentedJSON pretty-prints a JSON document.
func writeIndentedJSON(w io.Writer, b []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "    "); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
