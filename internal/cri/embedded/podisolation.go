package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/cri/embedded/podnet"
	"github.com/minilet/minilet/internal/cri/embedded/podns"
	"github.com/minilet/minilet/internal/cri/embedded/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A pod's isolation on the embedded runtime: unless it uses the host's,
// a pod gets a network namespace (attached by CNI) and with it a UTS
// namespace with the pod's hostname, and an IPC namespace; its containers
// join them. Containers from images get a PID namespace each, or the
// pod's (shareProcessNamespace: held by a pause process), or the host's
// (hostPID). Host-image containers stay in the host's PID namespace.

// podNamespaces decides which namespaces of its own a sandbox gets, from
// its namespace options, and refuses the modes the embedded runtime cannot
// give rather than run the pod less isolated than asked.
func podNamespaces(config *runtimeapi.PodSandboxConfig) (kinds []podns.Kind, pid runtimeapi.NamespaceMode, err error) {
	opts := config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	switch opts.GetNetwork() {
	case runtimeapi.NamespaceMode_POD:
		kinds = append(kinds, podns.Net, podns.UTS)
	case runtimeapi.NamespaceMode_NODE:
	default:
		return nil, 0, fmt.Errorf("field linux.security_context.namespace_options.network: mode %s is not supported", opts.GetNetwork())
	}
	switch opts.GetIpc() {
	case runtimeapi.NamespaceMode_POD:
		kinds = append(kinds, podns.IPC)
	case runtimeapi.NamespaceMode_NODE:
	default:
		return nil, 0, fmt.Errorf("field linux.security_context.namespace_options.ipc: mode %s is not supported", opts.GetIpc())
	}
	switch pid = opts.GetPid(); pid {
	case runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_POD:
	default:
		return nil, pid, fmt.Errorf("field linux.security_context.namespace_options.pid: mode %s is not supported", opts.GetPid())
	}
	if config.GetHostname() != "" && opts.GetNetwork() == runtimeapi.NamespaceMode_NODE {
		return nil, pid, errors.New("field hostname: a pod on the host's network keeps the host's hostname")
	}
	return kinds, pid, nil
}

// nsDir is where a sandbox's namespaces are held.
func (r *Runtime) nsDir(id string) string { return filepath.Join(r.stateDir, "netns", id) }

// setUpPod gives a recorded (not yet ready) sandbox its namespaces and
// network and records them; on failure what it made is undone.
func (r *Runtime) setUpPod(ctx context.Context, rec *sandbox.Record, kinds []podns.Kind, pid runtimeapi.NamespaceMode) error {
	paths, err := podns.Create(r.nsDir(rec.ID), kinds, rec.Hostname)
	if err != nil {
		return fmt.Errorf("create the pod's namespaces: %w", err)
	}
	undo := func() {
		r.stopPause(rec)
		_ = podns.Remove(r.nsDir(rec.ID))
	}
	rec.Namespaces = map[string]string{}
	for k, p := range paths {
		rec.Namespaces[string(k)] = p
	}
	if pid == runtimeapi.NamespaceMode_POD {
		if err := r.startPause(rec); err != nil {
			undo()
			return err
		}
	}
	netns := paths[podns.Net]
	if netns != "" && r.net == nil {
		undo()
		return errors.New("pod networking is not configured (no --cni-conf-dir); only hostNetwork pods can run")
	}
	// Recorded before ADD: a crash during it leaves a sandbox whose
	// removal ends the pause and deletes what ADD made. (A pod on the
	// host's namespaces has nothing to record yet: no extra write.)
	if netns != "" || rec.PausePID != 0 {
		if err := r.sandboxes.Update(rec.ID, func(s *sandbox.Record) {
			s.Namespaces, s.PausePID, s.PauseStart, s.Attached = rec.Namespaces, rec.PausePID, rec.PauseStart, netns != ""
		}); err != nil {
			undo()
			return err
		}
	}
	if netns != "" {
		rec.Attached = true
		att, err := r.net.Attach(ctx, podNet(rec, netns)) // deletes what it added on failure
		if err != nil {
			undo()
			return err
		}
		rec.Network, rec.IPs, rec.IP = att.Network, att.IPs, att.IPs[0]
	}
	return nil
}

// startPause starts the pause holding the pod's shared PID namespace and
// holds the namespace; the pause is killed with the sandbox. Like the
// container monitors, it is a session of its own that outlives the agent.
func (r *Runtime) startPause(rec *sandbox.Record) error {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { _ = devnull.Close() }()
	cmd := &exec.Cmd{
		Path: r.monitor, Args: []string{monitorproc.PauseArg0}, Env: []string{monitorproc.PauseEnv + "=1"},
		Stdin: devnull, Stdout: devnull, Stderr: devnull,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWPID},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the pause process holding the pod's pid namespace: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	// Out of the agent's cgroup, with the monitors: a service manager
	// ending the agent's cgroup must not end the pod's PID namespace.
	if err := r.ctrs.JoinMonitorCgroup(cmd.Process.Pid); err != nil {
		r.log.Warn("the pause stays in the agent's cgroup", "sandbox", rec.ID, "err", err)
	}
	rec.PausePID = cmd.Process.Pid
	rec.PauseStart, _ = monitorproc.ProcStartTicks(rec.PausePID)
	p, err := podns.HoldPID(r.nsDir(rec.ID), rec.PausePID)
	if err != nil {
		r.stopPause(rec)
		return err
	}
	rec.Namespaces[string(podns.PID)] = p
	return nil
}

// pauseAlive reports whether the sandbox's pause (if it has one) still
// runs: without it the pod's PID namespace takes no new process.
func pauseAlive(rec *sandbox.Record) bool {
	if rec.PausePID == 0 {
		return true
	}
	ticks, alive := monitorproc.ProcStartTicks(rec.PausePID)
	return alive && ticks == rec.PauseStart
}

// stopPause ends the sandbox's pause, if it is still the process started
// (not a reused PID).
func (r *Runtime) stopPause(rec *sandbox.Record) {
	if rec.PausePID != 0 && pauseAlive(rec) {
		_ = syscall.Kill(rec.PausePID, syscall.SIGKILL)
	}
}

// tearDownPod detaches the sandbox from its network and releases its
// namespaces. Idempotent.
func (r *Runtime) tearDownPod(ctx context.Context, id string) error {
	rec, err := r.sandboxes.Get(id)
	if err != nil {
		return nil
	}
	if rec.Attached && r.net != nil {
		netns := rec.Namespaces[string(podns.Net)]
		if !podns.Alive(netns) {
			netns = "" // plugins still release what lies outside it
		}
		if err := r.net.Detach(ctx, podNet(&rec, netns), rec.Network); err != nil {
			return fmt.Errorf("detach pod %s/%s from its network: %w", rec.Namespace, rec.Name, err)
		}
		if err := r.sandboxes.Update(id, func(s *sandbox.Record) { s.Attached, s.Network = false, "" }); err != nil {
			return err
		}
	}
	r.stopPause(&rec)
	// The record keeps its namespaces' paths, which say what the pod had.
	if err := podns.Remove(r.nsDir(id)); err != nil {
		return fmt.Errorf("release the namespaces of pod %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return nil
}

// removeOrphanNamespaces releases namespaces held for sandboxes that have
// no record (a crash between making them and recording them), detaching
// them from the network first.
func (r *Runtime) removeOrphanNamespaces(ctx context.Context) {
	entries, err := os.ReadDir(filepath.Join(r.stateDir, "netns"))
	if err != nil {
		return
	}
	for _, e := range entries {
		id := e.Name()
		if _, err := r.sandboxes.Get(id); err == nil {
			continue
		}
		if r.net != nil {
			netns := filepath.Join(r.nsDir(id), string(podns.Net))
			if !podns.Alive(netns) {
				netns = ""
			}
			if err := r.net.Detach(ctx, podnet.Pod{SandboxID: id, NetNS: netns}, ""); err != nil {
				r.log.Warn("cannot detach an orphaned pod network namespace", "sandbox", id, "err", err)
			}
		}
		if err := podns.Remove(r.nsDir(id)); err != nil {
			r.log.Warn("cannot release orphaned pod namespaces", "sandbox", id, "err", err)
		}
	}
}

func podNet(rec *sandbox.Record, netns string) podnet.Pod {
	p := podnet.Pod{SandboxID: rec.ID, Name: rec.Name, Namespace: rec.Namespace, UID: rec.UID, NetNS: netns}
	for _, port := range rec.Ports {
		p.Ports = append(p.Ports, podnet.PortMapping(port))
	}
	return p
}

// sandboxPorts are the config's host ports, in the portmap plugin's terms.
func sandboxPorts(config *runtimeapi.PodSandboxConfig) []sandbox.Port {
	var out []sandbox.Port
	for _, m := range config.GetPortMappings() {
		if m.GetHostPort() <= 0 {
			continue
		}
		out = append(out, sandbox.Port{HostPort: m.GetHostPort(), ContainerPort: m.GetContainerPort(),
			Protocol: strings.ToLower(m.GetProtocol().String()), HostIP: m.GetHostIp()})
	}
	return out
}

// namespaceModes is how a sandbox's status reports its namespaces.
func namespaceModes(sb *sandbox.Record) *runtimeapi.NamespaceOption {
	mode := func(k podns.Kind) runtimeapi.NamespaceMode {
		if sb.Namespaces[string(k)] != "" {
			return runtimeapi.NamespaceMode_POD
		}
		return runtimeapi.NamespaceMode_NODE
	}
	pid := runtimeapi.NamespaceMode_CONTAINER
	switch {
	case sb.HostPID:
		pid = runtimeapi.NamespaceMode_NODE
	case sb.Namespaces[string(podns.PID)] != "":
		pid = runtimeapi.NamespaceMode_POD
	}
	return &runtimeapi.NamespaceOption{Network: mode(podns.Net), Ipc: mode(podns.IPC), Pid: pid}
}

// sandboxNetwork is a sandbox's addresses as CRI reports them.
func sandboxNetwork(sb *sandbox.Record) *runtimeapi.PodSandboxNetworkStatus {
	st := &runtimeapi.PodSandboxNetworkStatus{Ip: sb.IP}
	for _, ip := range sb.IPs[min(1, len(sb.IPs)):] {
		st.AdditionalIps = append(st.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
	}
	return st
}

// writeResolvConf writes the pod's resolv.conf from the sandbox's DNS
// config, as other runtimes do; with none, containers keep the host's.
func (r *Runtime) writeResolvConf(rec *sandbox.Record, dns *runtimeapi.DNSConfig) error {
	if len(dns.GetServers()) == 0 && len(dns.GetSearches()) == 0 && len(dns.GetOptions()) == 0 {
		return nil
	}
	var b strings.Builder
	if len(dns.GetSearches()) > 0 {
		b.WriteString("search " + strings.Join(dns.GetSearches(), " ") + "\n")
	}
	for _, s := range dns.GetServers() {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(dns.GetOptions()) > 0 {
		b.WriteString("options " + strings.Join(dns.GetOptions(), " ") + "\n")
	}
	dir := r.nsDir(rec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write the pod's resolv.conf: %w", err)
	}
	rec.ResolvConf = p
	return nil
}

// podFileMounts are the files of the pod every container gets unless its
// config mounts something there: its resolv.conf.
func podFileMounts(sb *sandbox.Record, config *runtimeapi.ContainerConfig) []monitorproc.BindMount {
	if sb.ResolvConf == "" {
		return nil
	}
	for _, m := range config.GetMounts() {
		if filepath.Clean(m.GetContainerPath()) == "/etc/resolv.conf" {
			return nil
		}
	}
	return []monitorproc.BindMount{{Source: sb.ResolvConf, Target: "/etc/resolv.conf"}}
}
