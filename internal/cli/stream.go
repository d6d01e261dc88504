package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy" //nolint:staticcheck // client-go v0.37 executors and dialers still take its types
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	transportspdy "k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
)

// ExitError carries the exit code of a command run with exec, for the
// CLI's own exit code.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("command terminated with exit code %d", e.Code) }

type streamFlags struct {
	namespace, container string
	stdin, tty           bool
}

func newExecCommand(e *env) *cobra.Command {
	var f streamFlags
	cmd := &cobra.Command{
		Use:   "exec POD [-c CONTAINER] [-i] [-t] -- COMMAND [ARGS...]",
		Short: "Run a command in a container",
		Long: "Run a command in a running container, as kubectl exec does: -i passes stdin,\n" +
			"-t gives it a terminal. The command's exit code is the CLI's.",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("usage: minilet exec POD [-c CONTAINER] [-i] [-t] -- COMMAND [ARGS...]")
			}
			return e.runStream(cmd, "exec", args[0], args[1:], f)
		},
	}
	addStreamFlags(cmd, &f)
	return cmd
}

func newAttachCommand(e *env) *cobra.Command {
	var f streamFlags
	cmd := &cobra.Command{
		Use:   "attach POD [-c CONTAINER] [-i] [-t]",
		Short: "Attach to a running container's output (and with -i its stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runStream(cmd, "attach", args[0], nil, f)
		},
	}
	addStreamFlags(cmd, &f)
	return cmd
}

func addStreamFlags(cmd *cobra.Command, f *streamFlags) {
	fl := cmd.Flags()
	fl.StringVarP(&f.namespace, "namespace", "n", "default", "the pod's namespace")
	fl.StringVarP(&f.container, "container", "c", "", "the container; required when the pod has several")
	fl.BoolVarP(&f.stdin, "stdin", "i", false, "pass stdin to the container")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the container a terminal")
}

// runStream runs an exec or attach session over SPDY.
func (e *env) runStream(cmd *cobra.Command, kind, podName string, command []string, f streamFlags) error {
	c, pod, ctr, err := e.findContainer(cmd, f.namespace, podName, f.container)
	if err != nil {
		return err
	}
	q := url.Values{}
	for _, a := range command {
		q.Add("command", a)
	}
	q.Set("output", "1")
	if !f.tty {
		q.Set("error", "1")
	}
	if f.stdin {
		q.Set("input", "1")
	}
	if f.tty {
		q.Set("tty", "1")
	}
	u, err := url.Parse(fmt.Sprintf("%s/%s/%s/%s/%s?%s", c.base, kind, url.PathEscape(pod.Namespace), url.PathEscape(pod.Name), url.PathEscape(ctr), q.Encode()))
	if err != nil {
		return err
	}
	rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{TLS: c.tls, PingPeriod: 5 * time.Second})
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewSPDYExecutorForTransports(rt, rt, http.MethodPost, u)
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdout: cmd.OutOrStdout(), Tty: f.tty}
	if !f.tty {
		opts.Stderr = cmd.ErrOrStderr()
	}
	if f.stdin {
		opts.Stdin = cmd.InOrStdin()
	}
	if f.tty {
		restore, sizes := rawTerminal(opts.Stdin)
		defer restore()
		opts.TerminalSizeQueue = sizes
	}
	err = ex.StreamWithContext(cmd.Context(), opts)
	var code utilexec.CodeExitError
	if errors.As(err, &code) {
		return ExitError{Code: code.Code}
	}
	if err != nil {
		return fmt.Errorf("%s in container %q of pod %s/%s: %w", kind, ctr, pod.Namespace, pod.Name, err)
	}
	return nil
}

// rawTerminal puts the local terminal (when stdin is one) in raw mode and
// reports its size and changes; restore undoes it.
func rawTerminal(in io.Reader) (restore func(), sizes remotecommand.TerminalSizeQueue) {
	file, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(file.Fd())) {
		return func() {}, nil
	}
	fd := int(file.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return func() {}, nil
	}
	q := &winchQueue{fd: fd, ch: make(chan os.Signal, 1), first: true}
	signal.Notify(q.ch, syscall.SIGWINCH)
	return func() {
		signal.Stop(q.ch)
		_ = term.Restore(fd, old)
	}, q
}

// winchQueue reports the terminal's size at start and after each SIGWINCH.
type winchQueue struct {
	fd    int
	ch    chan os.Signal
	first bool
}

func (q *winchQueue) Next() *remotecommand.TerminalSize {
	if !q.first {
		if _, ok := <-q.ch; !ok {
			return nil
		}
	}
	q.first = false
	w, h, err := term.GetSize(q.fd)
	if err != nil {
		return nil
	}
	return &remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
}

func newPortForwardCommand(e *env) *cobra.Command {
	var namespace, address string
	cmd := &cobra.Command{
		Use:   "port-forward POD [LOCAL_PORT:]REMOTE_PORT...",
		Short: "Forward local ports to a pod",
		Long:  "Forward local ports to a pod's ports until interrupted, as kubectl port-forward does.",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, pod, err := e.findPod(cmd, namespace, args[0])
			if err != nil {
				return err
			}
			u, err := url.Parse(fmt.Sprintf("%s/portForward/%s/%s", c.base, url.PathEscape(pod.Namespace), url.PathEscape(pod.Name)))
			if err != nil {
				return err
			}
			rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{TLS: c.tls, PingPeriod: 5 * time.Second})
			if err != nil {
				return err
			}
			dialer := transportspdy.NewDialer(rt, &http.Client{Transport: rt}, http.MethodPost, u)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, strings.Split(address, ","), args[1:], nil, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			if err := pf.ForwardPorts(); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "the pod's namespace")
	cmd.Flags().StringVar(&address, "address", "localhost", "local addresses to listen on, comma-separated")
	return cmd
}
