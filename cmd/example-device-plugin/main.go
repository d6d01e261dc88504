// Command example-device-plugin is a real Kubernetes device plugin
// (deviceplugin/v1beta1) whose devices are listed in a file or on the
// command line. It works with minilet and with the kubelet: it registers
// on kubelet.sock, streams its devices, re-reads the devices file on change
// (a line "ID unhealthy" marks a device unhealthy) and registers again when
// the agent restarts.
//
//	example-device-plugin --resource example.com/dev --devices-file /etc/example-devices
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func main() {
	var cfg Config
	var devices string
	flag.StringVar(&cfg.Resource, "resource", "example.com/dev", "extended resource name to advertise")
	flag.StringVar(&cfg.DevicesFile, "devices-file", "", `file with one device ID per line ("ID unhealthy" marks it unhealthy); re-read on change`)
	flag.StringVar(&devices, "devices", "", "comma-separated healthy device IDs (when --devices-file is not given)")
	flag.StringVar(&cfg.PluginDir, "plugin-dir", pluginapi.DevicePluginPath, "device plugin directory holding kubelet.sock")
	flag.StringVar(&cfg.SocketName, "socket-name", "", "this plugin's socket file name (default derived from --resource)")
	flag.StringVar(&cfg.DeviceNode, "device-node", "", "host device node given to containers as /dev/<name>-<ID> (e.g. /dev/null); empty: env only")
	flag.DurationVar(&cfg.RegisterDelay, "register-delay", 0, "wait this long before every registration (a slow plugin, for tests)")
	flag.Parse()
	if devices != "" {
		cfg.Devices = strings.Split(devices, ",")
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("plugin", cfg.Resource)
	p, err := newPlugin(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example-device-plugin:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := p.run(ctx); err != nil {
		log.Error("plugin failed", "err", err)
		os.Exit(1)
	}
}
