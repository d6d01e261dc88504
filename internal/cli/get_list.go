package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/minilet/minilet/internal/errdefs"
)

// listing checks a list command's flags and returns its client, label
// selector and namespace ("" for all).
func (e *env) listing(cmd *cobra.Command, f *getFlags) (*client, labels.Selector, string, error) {
	if err := checkOutput(f.output, "wide", "name"); err != nil {
		return nil, nil, "", err
	}
	sel, err := f.labelSelector()
	if err != nil {
		return nil, nil, "", err
	}
	c, err := e.client(cmd)
	if err != nil {
		return nil, nil, "", err
	}
	return c, sel, f.ns(), nil
}

// getPods is `get pods [NAME...]`: one name prints one object (for -o
// json|yaml, the Pod itself, not a list), several names or none a list.
// Names not found are reported after what was found, and make the
// command fail, as kubectl does.
func (e *env) getPods(cmd *cobra.Command, f *getFlags, names []string) error {
	c, sel, ns, err := e.listing(cmd, f)
	if err != nil {
		return err
	}
	list := func(ctx context.Context) ([]v1.Pod, error) {
		var l v1.PodList
		if err := c.getJSON(ctx, "/pods", &l); err != nil {
			return nil, err
		}
		pods := filterPods(l.Items, ns, sel)
		if len(names) == 0 {
			return pods, nil
		}
		found, _ := pickPods(pods, names)
		return found, nil
	}
	var l v1.PodList
	if err := c.getJSON(cmd.Context(), "/pods", &l); err != nil {
		return err
	}
	pods := filterPods(l.Items, ns, sel)
	var missing []string
	if len(names) > 0 {
		pods, missing = pickPods(pods, names)
	}
	for i := range pods {
		pods[i].APIVersion, pods[i].Kind = "v1", "Pod"
	}
	w := cmd.OutOrStdout()
	wide, withNS := f.output == "wide", ns == ""
	p := &batchPrinter[v1.Pod]{w: w, output: f.output, kind: "pod",
		name:   func(p *v1.Pod) string { return p.Name },
		header: podHeader(wide, withNS),
		cells:  func(p *v1.Pod) []string { return podCells(p, wide, withNS, e.now()) },
	}
	switch {
	case f.watch:
		if err := p.print(pods); err != nil {
			return err
		}
	case len(pods) == 0 && len(missing) > 0:
	case (f.output == "json" || f.output == "yaml") && len(names) == 1 && len(pods) == 1:
		if err := printObject(w, f.output, &pods[0]); err != nil {
			return err
		}
	case f.output == "json" || f.output == "yaml":
		l.Items = pods
		if err := printObject(w, f.output, &l); err != nil {
			return err
		}
	case f.output == "name":
		if err := p.print(pods); err != nil {
			return err
		}
	default:
		if err := printPods(w, pods, wide, withNS, e.now()); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return notFound("pods", missing)
	}
	if !f.watch {
		return nil
	}
	return watch(cmd.Context(), e.watchInterval(), pods, list, podWatchState, p.print)
}

// notFound is kubectl's error for names that matched nothing.
func notFound(resource string, names []string) error {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return &kubectlError{msg: fmt.Sprintf("%s %s not found", resource, strings.Join(quoted, ", ")), class: errdefs.ErrNotFound}
}

// kubectlError carries one of kubectl's messages word for word, classified
// for errors.Is.
type kubectlError struct {
	msg   string
	class error
}

func (e *kubectlError) Error() string { return e.msg }
func (e *kubectlError) Unwrap() error { return e.class }

// podWatchState is what -w compares between polls: a pod's identity and
// what its row shows, without the times that change by themselves.
func podWatchState(p *v1.Pod) (id, state string) {
	s := summarizePod(p, time.Time{})
	var restarts int32
	for _, c := range p.Status.ContainerStatuses {
		restarts += c.RestartCount
	}
	return p.Namespace + "/" + p.Name + "/" + string(p.UID),
		strings.Join([]string{s.Ready, s.Status, strconv.Itoa(int(restarts)), p.Status.PodIP, p.Spec.NodeName, p.ResourceVersion}, "|")
}

// getEvents is `get events`.
func (e *env) getEvents(cmd *cobra.Command, f *getFlags) error {
	c, sel, ns, err := e.listing(cmd, f)
	if err != nil {
		return err
	}
	list := func(ctx context.Context) ([]v1.Event, error) {
		var l v1.EventList
		if err := c.getJSON(ctx, "/events", &l); err != nil {
			return nil, err
		}
		out := filterEvents(l.Items, ns, sel)
		sortEvents(out)
		return out, nil
	}
	var l v1.EventList
	if err := c.getJSON(cmd.Context(), "/events", &l); err != nil {
		return err
	}
	evs := filterEvents(l.Items, ns, sel)
	w := cmd.OutOrStdout()
	wide := f.output == "wide"
	p := &batchPrinter[v1.Event]{w: w, output: f.output, kind: "event",
		name:   func(ev *v1.Event) string { return ev.Name },
		header: eventHeader(wide),
		cells:  func(ev *v1.Event) []string { return eventCells(ev, wide, e.now()) },
	}
	switch {
	case f.watch:
		sortEvents(evs)
		if err := p.print(evs); err != nil {
			return err
		}
		return watch(cmd.Context(), e.watchInterval(), evs, list, eventWatchState, p.print)
	case f.output == "json" || f.output == "yaml":
		l.Items = evs
		return printObject(w, f.output, &l)
	case f.output == "name":
		return p.print(evs)
	default:
		return printEvents(w, evs, wide, e.now())
	}
}

// filterEvents keeps events of namespace (all when empty) whose labels
// (the pod's, which the agent copies onto its events) match sel.
func filterEvents(evs []v1.Event, namespace string, sel labels.Selector) []v1.Event {
	var out []v1.Event
	for _, ev := range evs {
		evNS := ev.Namespace
		if evNS == "" {
			evNS = ev.InvolvedObject.Namespace
		}
		if namespace != "" && evNS != namespace {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(ev.Labels)) {
			continue
		}
		out = append(out, ev)
	}
	return out
}

func eventWatchState(ev *v1.Event) (id, state string) {
	_, last := eventTimes(ev)
	return ev.Namespace + "/" + ev.Name, fmt.Sprintf("%d|%s|%s", eventCount(ev), last.UTC().Format(time.RFC3339Nano), ev.Message)
}

// batchPrinter prints objects as -o asks, a batch at a time: the table
// header once, before the first row; for -o name, KIND/NAME; for json and
// yaml, one document per object (yaml documents separated by ---).
type batchPrinter[T any] struct {
	w       io.Writer
	output  string
	kind    string
	name    func(*T) string
	header  []string
	cells   func(*T) []string
	printed bool // something was printed: the header, or a yaml document
}

func (p *batchPrinter[T]) print(items []T) error {
	if len(items) == 0 {
		return nil
	}
	switch p.output {
	case "name":
		for i := range items {
			if _, err := fmt.Fprintf(p.w, "%s/%s\n", p.kind, p.name(&items[i])); err != nil {
				return err
			}
		}
		return nil
	case "json", "yaml":
		for i := range items {
			if p.output == "yaml" && p.printed {
				if _, err := fmt.Fprintln(p.w, "---"); err != nil {
					return err
				}
			}
			if err := printObject(p.w, p.output, &items[i]); err != nil {
				return err
			}
			p.printed = true
		}
		return nil
	}
	tw := newTable(p.w)
	if !p.printed {
		row(tw, p.header...)
		p.printed = true
	}
	for i := range items {
		row(tw, p.cells(&items[i])...)
	}
	return tw.Flush()
}
