// Package cli holds the user commands of the minilet binary (get, describe,
// logs, top, version). They talk to a running agent over its read-only HTTP
// API and print like kubectl.
package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/minilet/minilet/internal/pki"
	"github.com/minilet/minilet/internal/server"
	"github.com/minilet/minilet/internal/version"
)

// DefaultRootDir is the agent's default --root-dir, where the CLI looks for
// the address file of a local agent.
const DefaultRootDir = "/var/lib/minilet"

// DefaultServer is used when neither --server nor an address file is given.
const DefaultServer = "https://127.0.0.1:10250"

// Options are the dependencies of the commands; the zero value is the
// production setup.
type Options struct {
	// Now returns the current time, for AGE columns. Default time.Now.
	Now func() time.Time
	// HTTPClient talks to the agent. Default: a client without timeout
	// (logs -f streams) that, for an https server, presents the local
	// admin's certificate from <root-dir>/pki and pins the agent's
	// serving certificate.
	HTTPClient *http.Client
	// WatchInterval is how often `get -w` polls the agent. Default
	// DefaultWatchInterval.
	WatchInterval time.Duration
}

// AddCommands adds get, describe, logs, top and version to root, and the
// persistent flags --server and --root-dir when root does not have them.
// The server URL is --server when given, else the URL in
// <root-dir>/minilet.addr written by a local agent, else DefaultServer.
func AddCommands(root *cobra.Command, opts Options) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	pf := root.PersistentFlags()
	if pf.Lookup("server") == nil {
		pf.String("server", "", "URL of the agent's HTTPS API (default: from <root-dir>/minilet.addr, else "+DefaultServer+")")
	}
	if pf.Lookup("root-dir") == nil {
		pf.String("root-dir", DefaultRootDir, "the agent's root directory, where it records its address")
	}
	env := &env{opts: opts}
	root.AddCommand(
		newGetCommand(env),
		newDescribeCommand(env),
		newLogsCommand(env),
		newExecCommand(env),
		newAttachCommand(env),
		newPortForwardCommand(env),
		newTopCommand(env),
		newVersionCommand(),
		newImageCommand(),
	)
}

// env gives commands their client and clock.
type env struct {
	opts Options
}

func (e *env) now() time.Time { return e.opts.Now() }

// client resolves the server URL from the command's flags.
func (e *env) client(cmd *cobra.Command) (*client, error) {
	base, _ := cmd.Flags().GetString("server")
	rootDir, _ := cmd.Flags().GetString("root-dir")
	if rootDir == "" {
		rootDir = DefaultRootDir
	}
	if base == "" {
		u, err := server.ReadAddrFile(rootDir)
		switch {
		case err == nil:
			base = u
		case errors.Is(err, os.ErrPermission):
			return nil, err
		default:
			base = DefaultServer
		}
	}
	if !strings.Contains(base, "://") {
		base = "https://" + base
	}
	hc := e.opts.HTTPClient
	var tc *tls.Config
	if hc == nil {
		hc = &http.Client{}
		if strings.HasPrefix(base, "https://") {
			var err error
			tc, err = pki.ClientTLS(pki.Dir(rootDir))
			if err != nil {
				if errors.Is(err, os.ErrPermission) {
					return nil, fmt.Errorf("the agent's API needs its local client certificate, readable by root only: %w", err)
				}
				return nil, fmt.Errorf("the agent's API at %s: %w (is minilet running with --root-dir %s?)", base, err, rootDir)
			}
			hc.Transport = &http.Transport{TLSClientConfig: tc}
		}
	}
	return &client{base: strings.TrimRight(base, "/"), http: hc, tls: tc}, nil
}

// printObject writes v as JSON or YAML for -o json|yaml.
func printObject(w io.Writer, format string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if format == "json" {
		if b, err = yaml.YAMLToJSON(b); err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		return writeIndentedJSON(w, b)
	}
	_, err = w.Write(b)
	return err
}

// checkOutput validates -o.
func checkOutput(format string, allowed ...string) error {
	for _, a := range append([]string{"", "json", "yaml"}, allowed...) {
		if format == a {
			return nil
		}
	}
	return fmt.Errorf("unknown output format %q for -o: want one of json, yaml%s", format, prefixEach(", ", allowed))
}

func prefixEach(sep string, s []string) string {
	var b strings.Builder
	for _, x := range s {
		b.WriteString(sep + x)
	}
	return b.String()
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the minilet build and the Kubernetes release it implements",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get())
			return err
		},
	}
}
