package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/server"
)

func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage the images of the local agent",
	}
	var output string
	load := &cobra.Command{
		Use:   "load FILE",
		Short: "Load a docker-archive (docker save) or OCI-layout tarball into the local agent ('-' reads stdin)",
		Long: "Load the images of a docker-archive (docker save) or OCI-layout tarball into\n" +
			"the agent's image store. The file is uploaded to the agent's admin socket\n" +
			"<root-dir>/" + server.AdminSocketName + ", which only root can open.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			in := cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fmt.Errorf("image load: %w", err)
				}
				defer func() { _ = f.Close() }()
				in = f
			}
			rootDir, _ := cmd.Flags().GetString("root-dir")
			if rootDir == "" {
				rootDir = DefaultRootDir
			}
			list, err := loadImages(cmd.Context(), server.AdminSocketPath(rootDir), in)
			if err != nil {
				return err
			}
			if output != "" {
				return printObject(cmd.OutOrStdout(), output, list)
			}
			for _, img := range list.Items {
				if len(img.RepoTags) == 0 {
					if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Loaded image ID: %s\n", img.ID); err != nil {
						return err
					}
				}
				for _, t := range img.RepoTags {
					if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Loaded image: %s\n", t); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	load.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	cmd.AddCommand(load)
	return cmd
}

// loadImages streams archive to POST /images/load on the admin socket.
func loadImages(ctx context.Context, socket string, archive io.Reader) (*server.LoadedImageList, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://minilet/images/load", archive)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("cannot open the agent's admin socket %s (it is root's only): %w", socket, err)
		}
		return nil, fmt.Errorf("cannot reach the agent's admin socket %s (is minilet running? see --root-dir): %w", socket, errors.Join(err, errdefs.ErrUnavailable))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read the agent's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return nil, &APIError{Code: resp.StatusCode, Reason: st.Reason, Message: msg}
	}
	var list server.LoadedImageList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decode the agent's answer: %w", err)
	}
	return &list, nil
}
