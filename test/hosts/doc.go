// Package hosts is a test bed of "real hosts": node containers with systemd
// as PID 1, the way kind makes nodes, so that minilet can later be installed
// as a systemd service and tested the way it runs in production.
//
// A node is a systemd-nspawn container on this machine's kernel, at native
// speed: its own copy-on-write root filesystem (an overlay on a Debian 12
// image that scripts/hosts-image.sh builds once and caches), its own network
// namespace on a private bridge shared with the other nodes of its Network,
// and its own cgroup in every hierarchy, which nspawn is launched from so
// that everything the node does stays under it. Nothing reaches outside the
// machine: the nodes have no default route and no NAT.
//
// Everything needs root; tests skip without it (CI runs as root).
//
//	net := hosts.NewNetwork(t)
//	a := hosts.StartNode(t, hosts.NodeConfig{Name: "a", Network: net})
//	out, err := a.Run(ctx, "systemctl", "is-system-running")
//
// The host needs no systemd of its own: nspawn runs with --register=no and
// --keep-unit, and commands enter a node with nsenter.
package hosts
