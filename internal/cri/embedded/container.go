package embedded

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"

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
	var args, env []string
	var workDir, imageID, stopSignal string
	var rf *rootfsRecord
	id := newID()
	if isHostImage(image) {
		args = append(append([]string{}, config.GetCommand()...), config.GetArgs()...)
		if len(args) == 0 {
			return "", errInvalid("CreateContainer %q in pod %s/%s: field command is required (the host image has no default command)", name, sb.Namespace, sb.Name)
		}
		image, env, workDir = hostImage, containerEnv(config.GetEnvs()), config.GetWorkingDir()
	} else {
		// Until the container record holds them, the image's layers are
		// held here.
		img, release, ok := r.images.Acquire(image)
		if ok {
			defer release()
		}
		if !ok {
			return "", errNotFound("CreateContainer %q in pod %s/%s: image %q is not present", name, sb.Namespace, sb.Name, image)
		}
		args, env, workDir, rf, err = r.imageContainer(&img, config)
		if err != nil {
			return "", errInvalid("CreateContainer %q in pod %s/%s: %v", name, sb.Namespace, sb.Name, err)
		}
		imageID, stopSignal = img.ID, img.Config.StopSignal
	}
	if !sb.Ready {
		return "", errConflict("CreateContainer %q: pod sandbox %s is not ready", name, podSandboxID)
	}
	parent := sb.CgroupParent
	if parent == "" {
		parent = defaultCgroupParent
	}
	rec := containerRecord{
		ID: id, SandboxID: podSandboxID, Name: name, Attempt: config.GetMetadata().GetAttempt(),
		Image: image, ImageID: imageID, Rootfs: rf, StopSignal: stopSignal, Labels: maps.Clone(config.GetLabels()), Annotations: maps.Clone(config.GetAnnotations()),
		LogPath: config.GetLogPath(), Args: args, Env: env,
		WorkingDir: workDir, Resources: fromCRIResources(config.GetLinux().GetResources()),
		CgroupPath: path.Join("/", parent, id), CreatedAt: r.clock.Now().UnixNano(),
	}
	if rec.WorkingDir == "" {
		rec.WorkingDir = "/"
	}
	if sb.LogDirectory != "" && rec.LogPath != "" {
		rec.LogFile = filepath.Join(sb.LogDirectory, rec.LogPath)
	}
	if rf == nil && (len(config.GetMounts()) > 0 || len(config.GetDevices()) > 0) {
		r.log.Debug("host-image container: mounts and devices are the host's own, not applied", "container", id, "name", name)
	}
	dir := filepath.Join(r.containersDir(), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("CreateContainer %q: %w", name, err)
	}
	if rf != nil {
		if err := r.prepareRootfs(dir, rf); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("CreateContainer %q: writable layer: %w", name, err)
		}
		rec.Rootfs = rf
	}
	if err := statefile.Write(filepath.Join(dir, fileContainer), rec); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("CreateContainer %q: %w", name, err)
	}
	r.mu.Lock()
	r.containers[id] = &container{rec: rec, dir: dir, exited: make(chan struct{})}
	r.mu.Unlock()
	r.log.Info("container created", "container", id, "name", name, "sandbox", podSandboxID)
	return id, nil
}

// imageRef is the image ID containers report: the config digest, or
// "host".
func (rec *containerRecord) imageRef() string {
	if rec.ImageID != "" {
		return rec.ImageID
	}
	return rec.Image
}

// containerEnv turns CRI env vars into KEY=VALUE, adding the PATH and HOME an
// image would normally provide.
func containerEnv(kvs []*runtimeapi.KeyValue) []string {
	var env []string
	has := map[string]bool{}
	for _, kv := range kvs {
		env = append(env, kv.GetKey()+"="+string(kv.GetValue()))
		has[kv.GetKey()] = true
	}
	if !has["PATH"] {
		env = append(env, "PATH="+defaultPath)
	}
	if !has["HOME"] {
		env = append(env, "HOME=/root")
	}
	if !has["HOSTNAME"] {
		if h, err := os.Hostname(); err == nil {
			env = append(env, "HOSTNAME="+h)
		}
	}
	return env
}

func fromCRIResources(l *runtimeapi.LinuxContainerResources) *resources {
	if l == nil {
		return nil
	}
	res := &resources{
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

func toCRIResources(res *resources) *runtimeapi.ContainerResources {
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

func (r *Runtime) getContainer(id string) (*container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return nil, errNotFound("container %q", id)
	}
	return c, nil
}

// state derives the CRI state from the monitor's records. Callers hold r.mu.
func (c *container) state() runtimeapi.ContainerState {
	switch {
	case c.exit != nil:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	case c.start != nil:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	default:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	}
}

// ListContainers lists containers matching filter (id, state, sandbox id,
// labels), oldest first.
func (r *Runtime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range r.containers {
		st := c.state()
		if filter != nil {
			if filter.GetId() != "" && !matchID(c.rec.ID, filter.GetId()) {
				continue
			}
			if filter.GetPodSandboxId() != "" && !matchID(c.rec.SandboxID, filter.GetPodSandboxId()) {
				continue
			}
			if filter.GetState() != nil && filter.GetState().GetState() != st {
				continue
			}
			if !matchLabels(c.rec.Labels, filter.GetLabelSelector()) {
				continue
			}
		}
		out = append(out, &runtimeapi.Container{
			Id: c.rec.ID, PodSandboxId: c.rec.SandboxID,
			Metadata: &runtimeapi.ContainerMetadata{Name: c.rec.Name, Attempt: c.rec.Attempt},
			Image:    &runtimeapi.ImageSpec{Image: c.rec.Image}, ImageRef: c.rec.imageRef(), ImageId: c.rec.imageRef(),
			State: st, CreatedAt: c.rec.CreatedAt,
			Labels: maps.Clone(c.rec.Labels), Annotations: maps.Clone(c.rec.Annotations),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out, nil
}

// ContainerStatus reports a container, including its exit code and reason
// ("Completed", "Error", "OOMKilled", "StartError") once it has exited.
func (r *Runtime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[containerID]
	if !ok {
		return nil, errNotFound("container %q", containerID)
	}
	st := &runtimeapi.ContainerStatus{
		Id:       c.rec.ID,
		Metadata: &runtimeapi.ContainerMetadata{Name: c.rec.Name, Attempt: c.rec.Attempt},
		State:    c.state(), CreatedAt: c.rec.CreatedAt,
		Image: &runtimeapi.ImageSpec{Image: c.rec.Image}, ImageRef: c.rec.imageRef(), ImageId: c.rec.imageRef(),
		Labels: maps.Clone(c.rec.Labels), Annotations: maps.Clone(c.rec.Annotations),
		LogPath: c.rec.LogFile, Resources: toCRIResources(c.rec.Resources),
	}
	if c.start != nil {
		st.StartedAt = c.start.StartedAt
	}
	if c.exit != nil {
		st.FinishedAt = c.exit.FinishedAt
		st.ExitCode = c.exit.ExitCode
		st.Reason = c.exit.Reason
		st.Message = c.exit.Message
		if c.start == nil || c.start.Error != "" {
			st.StartedAt = 0
		}
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if verbose && c.start != nil {
		resp.Info = map[string]string{"pid": strconv.Itoa(c.start.Pid), "monitorPid": strconv.Itoa(c.start.MonitorPid), "cgroup": c.rec.CgroupPath}
	}
	return resp, nil
}

// UpdateContainerResources records new limits and writes them into the
// container's cgroup if it runs.
func (r *Runtime) UpdateContainerResources(ctx context.Context, containerID string, res *runtimeapi.ContainerResources) error {
	r.mu.Lock()
	c, ok := r.containers[containerID]
	if !ok {
		r.mu.Unlock()
		return errNotFound("container %q", containerID)
	}
	running := c.state() == runtimeapi.ContainerState_CONTAINER_RUNNING
	newRes := fromCRIResources(res.GetLinux())
	rec := c.rec
	rec.Resources = newRes
	r.mu.Unlock()
	if running {
		n, err := cgroupName(rec.CgroupPath)
		if err == nil {
			err = r.cg.Update(n, cgroupResources(newRes))
		}
		if err != nil {
			return fmt.Errorf("update resources of container %s: %w", containerID, err)
		}
	}
	if err := statefile.Write(filepath.Join(c.dir, fileContainer), rec); err != nil {
		return fmt.Errorf("update resources of container %s: %w", containerID, err)
	}
	r.mu.Lock()
	c.rec.Resources = newRes
	r.mu.Unlock()
	return nil
}

// RemoveContainer kills the container if it still runs and deletes it, its
// cgroup and its state (not its log, which the kubelet manages). Removing an
// unknown container is not an error (CRI: the call is idempotent).
func (r *Runtime) RemoveContainer(ctx context.Context, containerID string) error {
	c, err := r.getContainer(containerID)
	if err != nil {
		return nil
	}
	if err := r.StopContainer(ctx, containerID, 0); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove container %s: %w", containerID, err)
	}
	r.mu.Lock()
	starting := c.starting && c.start == nil
	r.mu.Unlock()
	if starting {
		return errConflict("remove container %s: it is being started", containerID)
	}
	if err := r.removeCgroup(c.rec.CgroupPath); err != nil {
		return fmt.Errorf("remove container %s: %w", containerID, err)
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove container %s: %w", containerID, err)
	}
	r.mu.Lock()
	delete(r.containers, containerID)
	r.mu.Unlock()
	if c.rec.Rootfs != nil {
		// Layers of an image removed while this container used them.
		if err := r.images.PruneLayers(r.layersInUse); err != nil {
			r.log.Warn("cannot prune unused image layers", "err", err)
		}
	}
	r.log.Info("container removed", "container", containerID, "name", c.rec.Name)
	return nil
}

// ReopenContainerLog makes the monitor reopen the container's log file (after
// the kubelet rotated it) and returns once the new file exists.
func (r *Runtime) ReopenContainerLog(ctx context.Context, containerID string) error {
	r.mu.Lock()
	c, ok := r.containers[containerID]
	if !ok {
		r.mu.Unlock()
		return errNotFound("container %q", containerID)
	}
	start, running, logFile := c.start, c.state() == runtimeapi.ContainerState_CONTAINER_RUNNING, c.rec.LogFile
	r.mu.Unlock()
	if !running || !monitorAlive(start) {
		return errConflict("reopen log of container %s: container is not running", containerID)
	}
	if logFile == "" {
		return errConflict("reopen log of container %s: container has no log path", containerID)
	}
	if err := signalProcess(start.MonitorPid, sigReopen); err != nil {
		return fmt.Errorf("reopen log of container %s: %w", containerID, err)
	}
	if err := pollUntil(ctx, logWaitTimeout, func() bool { _, err := os.Stat(logFile); return err == nil }); err != nil {
		return fmt.Errorf("reopen log of container %s: log file %s did not reappear: %w", containerID, logFile, err)
	}
	return nil
}

// shortID is the first 12 characters of an id, for process titles.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
