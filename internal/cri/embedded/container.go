package embedded

import (
	"context"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/minilet/minilet/internal/cri/embedded/layerfs"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/cri/embedded/spec"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
	"github.com/minilet/minilet/internal/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostImage is the image reference that means "the host's root filesystem".
const hostImage = "host"

func isHostImage(ref string) bool { return ref == "" || ref == hostImage }

func isNotFound(err error) bool { return errdefs.IsNotFound(err) }

// CreateContainer records a container in a sandbox; StartContainer runs it.
func (r *Runtime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	sb, err := r.sandboxes.Get(podSandboxID)
	if err != nil {
		return "", criErr(fmt.Errorf("CreateContainer: %w", err))
	}
	if config == nil || config.GetMetadata() == nil || config.GetMetadata().GetName() == "" {
		return "", errInvalid("CreateContainer in pod %s/%s: field metadata.name is required", sb.Namespace, sb.Name)
	}
	name := config.GetMetadata().GetName()
	image := config.GetImage().GetImage()
	if err := checkDevices(config, sb.Namespace, sb.Name, isHostImage(image)); err != nil {
		return "", err
	}
	var proc spec.Process
	var imageID, stopSignal string
	id := newID()
	if isHostImage(image) {
		if proc, err = spec.FromHost(config, sandboxConfig); err != nil {
			return "", errInvalid("CreateContainer %q in pod %s/%s: %v", name, sb.Namespace, sb.Name, err)
		}
		image = hostImage
	} else {
		// Until the container record holds them, the image's layers are
		// held here.
		img, release, ok := r.images.Acquire(image)
		if !ok {
			return "", errNotFound("CreateContainer %q in pod %s/%s: image %q is not present", name, sb.Namespace, sb.Name, image)
		}
		defer release()
		if proc, err = spec.FromImage(&img, config, sandboxConfig); err != nil {
			return "", errInvalid("CreateContainer %q in pod %s/%s: %v", name, sb.Namespace, sb.Name, err)
		}
		proc.Rootfs.Copy = !r.canOverlay()
		imageID, stopSignal = img.ID, img.Config.StopSignal
	}
	if !sb.Ready {
		return "", errConflict("CreateContainer %q: pod sandbox %s is not ready", name, podSandboxID)
	}
	parent := sb.CgroupParent
	if parent == "" {
		parent = defaultCgroupParent
	}
	rec := supervisor.Record{
		ID: id, SandboxID: podSandboxID, Name: name, Attempt: config.GetMetadata().GetAttempt(),
		Image: image, ImageID: imageID, Rootfs: proc.Rootfs, StopSignal: stopSignal,
		Labels: maps.Clone(config.GetLabels()), Annotations: maps.Clone(config.GetAnnotations()),
		LogPath: config.GetLogPath(), Args: proc.Args, Env: proc.Env,
		WorkingDir: proc.WorkingDir, Resources: fromCRIResources(config.GetLinux().GetResources()),
		CgroupPath: path.Join("/", parent, id), CreatedAt: r.clock.Now().UnixNano(),
		Stdin: config.GetStdin(), StdinOnce: config.GetStdinOnce(), Security: proc.Security,
	}
	if rec.WorkingDir == "" {
		rec.WorkingDir = "/"
	}
	rec.Pod = monitorproc.PodNamespaces{Join: maps.Clone(sb.Namespaces), HostPID: sb.HostPID, HeldUnder: filepath.Join(r.stateDir, "netns")}
	if files := podFileMounts(&sb, config); rec.Rootfs == nil {
		delete(rec.Pod.Join, "pid") // host-image containers keep the host's
		proc.Mounts = append(proc.Mounts, files...)
	} else {
		rec.Rootfs.Mounts = append(rec.Rootfs.Mounts, files...)
	}
	if sb.Hostname != "" {
		rec.Env = withHostname(rec.Env, config.GetEnvs(), sb.Hostname)
	}
	if sb.LogDirectory != "" && rec.LogPath != "" {
		rec.LogFile = filepath.Join(sb.LogDirectory, rec.LogPath)
	}
	if rec.Rootfs == nil {
		rec.Mounts = proc.Mounts
		r.logHostLimits(config, id)
	}
	if err := r.ctrs.Create(rec); err != nil {
		return "", criErr(fmt.Errorf("CreateContainer %q: %w", name, err))
	}
	return id, nil
}

// withHostname sets HOSTNAME in env to the pod's hostname, as other
// runtimes do, unless the container's config sets it.
func withHostname(env []string, own []*runtimeapi.KeyValue, hostname string) []string {
	for _, kv := range own {
		if kv.GetKey() == "HOSTNAME" {
			return env
		}
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOSTNAME=") {
			out = append(out, kv)
		}
	}
	return append(out, "HOSTNAME="+hostname)
}

// logHostLimits tells what a host-image container does not get of its
// config: its mounts are bound in a mount namespace of its own, but its
// devices are not (it sees the host's /dev), and none of its mounts can
// reach the host (bidirectional propagation).
func (r *Runtime) logHostLimits(config *runtimeapi.ContainerConfig, id string) {
	name := config.GetMetadata().GetName()
	if devs := config.GetDevices(); len(devs) > 0 {
		paths := make([]string, len(devs))
		for i, d := range devs {
			paths[i] = d.GetContainerPath()
		}
		r.log.Debug("host-image container: devices not applied, the host's own /dev is visible", "container", id, "name", name, "devices", paths)
	}
	for _, m := range config.GetMounts() {
		if m.GetPropagation() == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL {
			r.log.Warn("host-image container: bidirectional mount propagation is not supported, the mount gets host-to-container: mounts made inside stay inside",
				"container", id, "name", name, "containerPath", m.GetContainerPath())
		}
	}
}

// canOverlay reports whether containers from images can stand on an
// overlay mount of the image's layers; where not, they get a copy.
func (r *Runtime) canOverlay() bool {
	r.overlayOnce.Do(func() {
		r.overlayOK = layerfs.OverlaySupported(r.images.TmpDir())
		if !r.overlayOK {
			r.log.Warn("overlayfs cannot be mounted here; containers from images get a copy of the image instead")
		}
	})
	return r.overlayOK
}

func fromCRIResources(l *runtimeapi.LinuxContainerResources) *supervisor.Resources {
	if l == nil {
		return nil
	}
	res := &supervisor.Resources{
		CPUShares: l.GetCpuShares(), CPUQuota: l.GetCpuQuota(), CPUPeriod: l.GetCpuPeriod(),
		MemoryLimit: l.GetMemoryLimitInBytes(), MemorySwapLimit: l.GetMemorySwapLimitInBytes(),
	}
	if v, ok := l.GetUnified()["pids.max"]; ok {
		res.PidsLimit, _ = strconv.ParseInt(v, 10, 64)
	}
	if l.GetOomScoreAdj() != 0 {
		adj := l.GetOomScoreAdj()
		res.OOMScoreAdj = &adj
	}
	return res
}

func toCRIResources(res *supervisor.Resources) *runtimeapi.ContainerResources {
	if res == nil {
		return nil
	}
	l := &runtimeapi.LinuxContainerResources{
		CpuShares: res.CPUShares, CpuQuota: res.CPUQuota, CpuPeriod: res.CPUPeriod,
		MemoryLimitInBytes: res.MemoryLimit, MemorySwapLimitInBytes: res.MemorySwapLimit,
	}
	if res.OOMScoreAdj != nil {
		l.OomScoreAdj = *res.OOMScoreAdj
	}
	return &runtimeapi.ContainerResources{Linux: l}
}

// criState is a container's CRI state.
func criState(c *supervisor.Container) runtimeapi.ContainerState {
	switch c.State() {
	case supervisor.Exited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	case supervisor.Running:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	default:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	}
}

// criMounts are a container's bind mounts as ContainerStatus reports
// them, so that the kubelet's side finds a mount's host file (the
// termination message) by its container path. A container from an image
// reports its devices among them: it gets them as bind mounts too.
func criMounts(rec *supervisor.Record) []*runtimeapi.Mount {
	mounts := rec.Mounts
	if rec.Rootfs != nil {
		mounts = rec.Rootfs.Mounts
	}
	if len(mounts) == 0 {
		return nil
	}
	out := make([]*runtimeapi.Mount, 0, len(mounts))
	for _, m := range mounts {
		prop := runtimeapi.MountPropagation_PROPAGATION_PRIVATE
		if m.HostToContainer {
			prop = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		}
		out = append(out, &runtimeapi.Mount{ContainerPath: m.Target, HostPath: m.Source, Readonly: m.ReadOnly, Propagation: prop})
	}
	return out
}
