package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// defaultContainerAnnotation names the container kubectl picks when a pod
// has several and -c is not given.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// logsFlags are the flags of `minilet logs`.
type logsFlags struct {
	namespace  string
	container  string
	follow     bool
	tail       int64
	timestamps bool
	previous   bool
	since      time.Duration
	limitBytes int64
}

func newLogsCommand(e *env) *cobra.Command {
	var f logsFlags
	cmd := &cobra.Command{
		Use:   "logs POD [-c CONTAINER]",
		Short: "Print the logs of a container in a pod",
		Long: "Print the logs of a container in a pod. A pod with one container needs no -c.\n" +
			"POD is matched like `describe pod`: exactly, else a unique name prefix.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runLogs(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.namespace, "namespace", "n", "default", "the pod's namespace")
	fl.StringVarP(&f.container, "container", "c", "", "the container; required when the pod has several")
	fl.BoolVarP(&f.follow, "follow", "f", false, "stream new lines as they are written")
	fl.Int64Var(&f.tail, "tail", -1, "only the last N lines (-1: all)")
	fl.BoolVar(&f.timestamps, "timestamps", false, "prefix each line with its RFC3339Nano time")
	fl.BoolVarP(&f.previous, "previous", "p", false, "the previous instance of the container (before its last restart)")
	fl.DurationVar(&f.since, "since", 0, "only lines newer than this duration, e.g. 5s, 2m")
	fl.Int64Var(&f.limitBytes, "limit-bytes", 0, "stop after this many bytes (0: no limit)")
	return cmd
}

func (e *env) runLogs(cmd *cobra.Command, podName string, f logsFlags) error {
	c, pod, ctr, err := e.findContainer(cmd, f.namespace, podName, f.container)
	if err != nil {
		return err
	}
	q := url.Values{}
	if f.follow {
		q.Set("follow", "true")
	}
	if f.tail >= 0 {
		q.Set("tailLines", strconv.FormatInt(f.tail, 10))
	}
	if f.timestamps {
		q.Set("timestamps", "true")
	}
	if f.previous {
		q.Set("previous", "true")
	}
	if f.since > 0 {
		secs := int64((f.since + time.Second - 1) / time.Second)
		q.Set("sinceSeconds", strconv.FormatInt(secs, 10))
	}
	if f.limitBytes > 0 {
		q.Set("limitBytes", strconv.FormatInt(f.limitBytes, 10))
	}
	path := "/containerLogs/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name) + "/" + url.PathEscape(ctr)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.do(cmd.Context(), path)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(cmd.OutOrStdout(), resp.Body); err != nil {
		if errors.Is(err, context.Canceled) || cmd.Context().Err() != nil {
			return nil // interrupted by the user while following
		}
		return fmt.Errorf("read logs of container %q in pod %s/%s: %w", ctr, pod.Namespace, pod.Name, err)
	}
	return nil
}

// pickContainer returns the -c container, the only container, or the
// pod's default-container annotation; else an error listing the choices.
// findContainer is findPod, then the container (pickContainer).
func (e *env) findContainer(cmd *cobra.Command, namespace, podName, container string) (*client, *v1.Pod, string, error) {
	c, pod, err := e.findPod(cmd, namespace, podName)
	if err != nil {
		return nil, nil, "", err
	}
	ctr, err := pickContainer(pod, container)
	if err != nil {
		return nil, nil, "", err
	}
	return c, pod, ctr, nil
}

func pickContainer(pod *v1.Pod, name string) (string, error) {
	var all []string
	for _, c := range pod.Spec.InitContainers {
		all = append(all, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		all = append(all, c.Name)
	}
	if name != "" {
		if contains(all, name) {
			return name, nil
		}
		return "", fmt.Errorf("container %q is not in pod %s/%s, choose one of: [%s]: %w",
			name, pod.Namespace, pod.Name, strings.Join(all, " "), errdefs.ErrNotFound)
	}
	if len(pod.Spec.Containers) == 1 {
		return pod.Spec.Containers[0].Name, nil
	}
	if def := pod.Annotations[defaultContainerAnnotation]; def != "" && contains(all, def) {
		return def, nil
	}
	return "", fmt.Errorf("a container name must be specified for pod %s/%s with -c, choose one of: [%s]: %w",
		pod.Namespace, pod.Name, strings.Join(all, " "), errdefs.ErrInvalidArgument)
}
