package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
)

// Container waiting reasons for failed starts, in the kubelet's words.
const (
	reasonCreateContainerConfigError = "CreateContainerConfigError"
	reasonCreateContainerError       = "CreateContainerError"
	reasonRunContainerError          = "RunContainerError"
)

func (m *Manager) sandboxConfig(pod *v1.Pod, attempt uint32) *runtimeapi.PodSandboxConfig {
	// As the kubelet: a host-network pod keeps the node's hostname, so the
	// sandbox gets none (runtimes refuse one without a private UTS namespace).
	hostname, err := kernelHostname(pod, m.cfg.ClusterDomain)
	if err != nil { // createSandbox refuses the pod before it gets here
		hostname, _ = podHostname(pod, m.cfg.ClusterDomain)
	}
	if pod.Spec.HostNetwork {
		hostname = ""
	}
	ns := namespaceOptions(pod)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt},
		Hostname:     hostname,
		LogDirectory: m.podLogDir(pod.Namespace, pod.Name, string(pod.UID)),
		Labels:       sandboxLabels(pod),
		Annotations:  maps.Clone(pod.Annotations),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Privileged: hasPrivilegedContainer(pod)},
		},
	}
	// Refused sysctls stay out of the sandbox; the containers then fail
	// with CreateContainerConfigError naming the field.
	if sysctls, err := m.podSysctls(pod); err == nil {
		cfg.Linux.Sysctls = sysctls
	}
	if m.cfg.PodCgroups != nil {
		cfg.Linux.CgroupParent = m.cfg.PodCgroups.CgroupParent(pod)
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			proto := runtimeapi.Protocol_TCP
			switch p.Protocol {
			case v1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case v1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol: proto, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIp: p.HostIP})
		}
	}
	return cfg
}

// createSandbox runs a new sandbox and returns its ID and IP.
func (m *Manager) createSandbox(ctx context.Context, pod *v1.Pod, attempt uint32) (id, ip string, err error) {
	if _, err := kernelHostname(pod, m.cfg.ClusterDomain); err != nil {
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		return "", "", fmt.Errorf("pod %s: %w", podDesc(pod), err)
	}
	cfg := m.sandboxConfig(pod, attempt)
	// DNS only for a new sandbox (the runtime writes its resolv.conf
	// once), so that MissingClusterDNS comes once per sandbox, not per sync.
	cfg.DnsConfig = m.dnsConfig(pod)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", "", fmt.Errorf("create log directory of pod %s: %w", podDesc(pod), err)
	}
	id, err = m.cfg.Runtime.RunPodSandbox(ctx, cfg, m.cfg.RuntimeHandler)
	if err != nil {
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		return "", "", fmt.Errorf("run sandbox of pod %s: %w", podDesc(pod), err)
	}
	resp, err := m.cfg.Runtime.PodSandboxStatus(ctx, id, false)
	if err != nil {
		return id, "", fmt.Errorf("status of new sandbox %s of pod %s: %w", id, podDesc(pod), err)
	}
	return id, resp.GetStatus().GetNetwork().GetIp(), nil
}

// startContainer starts one container of the pod in the sandbox, after
// making sure of its image. It records the outcome in res. Whether the
// container may start now (restart policy, crash back-off) was decided
// before: see the lifecycle core.
func (m *Manager) startContainer(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, c *v1.Container,
	sandboxID, podIP string, sandboxCfg *runtimeapi.PodSandboxConfig, res *container.SyncResult) {
	prev := ps.FindContainer(c.Name)
	if reason, msg, retry := m.ensureImage(ctx, pod, c, sandboxCfg); reason != "" {
		res.Wait(c.Name, reason, msg)
		res.Requeue(retry)
		return
	}
	restartCount := 0
	if prev != nil {
		restartCount = prev.RestartCount + 1
	}
	fail := func(reason string, err error) {
		m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		res.Wait(c.Name, reason, err.Error())
		res.Requeue(backoffInitial)
		res.Err = errors.Join(res.Err, fmt.Errorf("container %q of pod %s: %w", c.Name, podDesc(pod), err))
	}
	cfg, err := m.containerConfig(ctx, pod, c, restartCount, podIP)
	if err != nil {
		fail(reasonCreateContainerConfigError, err)
		return
	}
	logDir := filepath.Join(sandboxCfg.LogDirectory, c.Name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		fail(reasonCreateContainerError, fmt.Errorf("create log directory: %w", err))
		return
	}
	id, err := m.cfg.Runtime.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
	if err != nil {
		fail(reasonCreateContainerError, err)
		return
	}
	m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	if err := m.cfg.Runtime.StartContainer(ctx, id); err != nil {
		fail(reasonRunContainerError, err)
		return
	}
	m.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	m.log.Info("started container", "pod", podDesc(pod), "container", c.Name, "id", id, "restartCount", restartCount)

	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if msg, err := m.runHook(ctx, pod, c, id, podIP, c.Lifecycle.PostStart, 0); err != nil {
			m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed: %s", msg)
			kerr := m.killContainer(ctx, pod, c, id, podIP, fmt.Sprintf("Container %s failed post-start hook, will be restarted", c.Name), "", nil)
			res.Wait(c.Name, "PostStartHookError", msg)
			res.Err = errors.Join(res.Err, fmt.Errorf("postStart hook of container %q of pod %s: %w", c.Name, podDesc(pod), err), kerr)
		}
	}
}

func (m *Manager) containerConfig(ctx context.Context, pod *v1.Pod, c *v1.Container, restartCount int, podIP string) (*runtimeapi.ContainerConfig, error) {
	envs, err := m.makeEnv(ctx, pod, c, podIP)
	if err != nil {
		return nil, err
	}
	vars := make(map[string]string, len(envs))
	for _, e := range envs {
		vars[e.Key] = string(e.Value)
	}
	mounts, err := m.makeMounts(pod, c, vars)
	if err != nil {
		return nil, err
	}
	if tm := m.terminationMessageMount(pod, c); tm != nil {
		mounts = append(mounts, tm)
	}
	hosts, err := m.hostsMount(pod, c, podIP)
	if err != nil {
		return nil, err
	}
	if hosts != nil {
		mounts = append(mounts, hosts)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image},
		Command:     expandAll(c.Command, vars),
		Args:        expandAll(c.Args, vars),
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Mounts:      mounts,
		Labels:      containerLabels(pod, c),
		Annotations: containerAnnotations(pod, c, restartCount),
		LogPath:     containerLogPath(c.Name, restartCount),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
	}
	if _, err := m.podSysctls(pod); err != nil {
		return nil, err
	}
	sc, err := m.securityContext(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	// The container's namespaces are the sandbox's: a runtime reads them
	// here (containerd puts a container without them in the pod's PID
	// namespace, where PID 1 is the pause process).
	sc.NamespaceOptions = namespaceOptions(pod)
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: sc}
	if m.cfg.PodCgroups != nil {
		cfg.Linux.Resources = m.cfg.PodCgroups.ContainerResources(pod, c)
	}
	if m.cfg.ContainerOptions != nil {
		opts, err := m.cfg.ContainerOptions.RunOptions(pod, c)
		if err != nil {
			return nil, fmt.Errorf("device allocation: %w", err)
		}
		if opts != nil {
			cfg.Envs = append(cfg.Envs, opts.Envs...)
			cfg.Mounts = append(cfg.Mounts, opts.Mounts...)
			cfg.Devices = append(cfg.Devices, opts.Devices...)
			cfg.CDIDevices = append(cfg.CDIDevices, opts.CDIDevices...)
			for k, v := range opts.Annotations {
				cfg.Annotations[k] = v
			}
		}
	}
	return cfg, nil
}

// namespaceOptions are the pod's namespaces, for its sandbox and each of
// its containers: the pod's network and IPC namespaces, a PID namespace
// per container, unless the pod shares the host's (hostNetwork, hostPID,
// hostIPC) or its process namespace (shareProcessNamespace).
func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostPID {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	} else if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	return ns
}
