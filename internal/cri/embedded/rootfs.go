package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
	"github.com/minilet/minilet/internal/cri/embedded/layerfs"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// rootfsRecord is how a container from an image gets its root filesystem:
// the image's layers under a writable layer of its own, in its own mount,
// PID, UTS and IPC namespaces.
type rootfsRecord struct {
	Layers []string    `json:"layers"` // diffIDs, base first
	Copy   bool        `json:"copy"`   // a private copy instead of an overlay mount
	User   userSpec    `json:"user"`
	Mounts []bindMount `json:"mounts,omitempty"`
	// Caps is the capability bounding set; nil keeps all (privileged).
	Caps *uint64 `json:"caps,omitempty"`
	// ReadOnly makes the root filesystem read-only (mounts stay as given).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// rootfsDir is where a container's writable layer lives.
func rootfsDir(containerDir string) string { return filepath.Join(containerDir, "rootfs") }

// imageContainer resolves what CreateContainer needs for a container from
// a stored image: its command (Kubernetes rules: command replaces the
// Entrypoint and drops Cmd; args replaces Cmd), environment (image Env,
// overridden per key by the container's), working directory and user.
func (r *Runtime) imageContainer(img *imagestore.Record, config *runtimeapi.ContainerConfig) (args, env []string, workDir string, rf *rootfsRecord, err error) {
	entry, cmd := img.Config.Entrypoint, img.Config.Cmd
	if len(config.GetCommand()) > 0 {
		entry, cmd = config.GetCommand(), config.GetArgs()
	} else if len(config.GetArgs()) > 0 {
		cmd = config.GetArgs()
	}
	args = append(append([]string{}, entry...), cmd...)
	if len(args) == 0 {
		return nil, nil, "", nil, fmt.Errorf("field command is empty and image %s has neither Entrypoint nor Cmd", img.ID)
	}
	env = mergeEnv(img.Config.Env, config.GetEnvs())
	workDir = config.GetWorkingDir()
	if workDir == "" {
		workDir = img.Config.WorkingDir
	}
	if workDir == "" {
		workDir = "/"
	}
	if !filepath.IsAbs(workDir) {
		return nil, nil, "", nil, fmt.Errorf("field workingDir %q is not absolute", workDir)
	}
	user, err := containerUser(img.Config.User, config.GetLinux().GetSecurityContext())
	if err != nil {
		return nil, nil, "", nil, err
	}
	caps, err := containerCaps(config.GetLinux().GetSecurityContext())
	if err != nil {
		return nil, nil, "", nil, err
	}
	rf = &rootfsRecord{Layers: append([]string(nil), img.Layers...), User: user, Caps: caps,
		ReadOnly: config.GetLinux().GetSecurityContext().GetReadonlyRootfs()}
	for _, m := range config.GetMounts() {
		if m.GetContainerPath() == "" || m.GetHostPath() == "" {
			return nil, nil, "", nil, fmt.Errorf("field mounts: container_path and host_path are required")
		}
		rf.Mounts = append(rf.Mounts, bindMount{Source: m.GetHostPath(), Target: m.GetContainerPath(), ReadOnly: m.GetReadonly()})
	}
	// Devices (from device plugins) are their host nodes bound in place.
	for _, d := range config.GetDevices() {
		if d.GetContainerPath() == "" || d.GetHostPath() == "" {
			return nil, nil, "", nil, fmt.Errorf("field devices: container_path and host_path are required")
		}
		rf.Mounts = append(rf.Mounts, bindMount{Source: d.GetHostPath(), Target: d.GetContainerPath(), ReadOnly: !strings.Contains(d.GetPermissions(), "w") && d.GetPermissions() != ""})
	}
	return args, env, workDir, rf, nil
}

// mergeEnv is the image's environment with the container's variables
// replacing those of the same name, plus a default PATH.
func mergeEnv(image []string, kvs []*runtimeapi.KeyValue) []string {
	var out []string
	index := map[string]int{}
	set := func(k, kv string) {
		if i, ok := index[k]; ok {
			out[i] = kv
			return
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range image {
		k, _, _ := strings.Cut(kv, "=")
		set(k, kv)
	}
	for _, kv := range kvs {
		set(kv.GetKey(), kv.GetKey()+"="+string(kv.GetValue()))
	}
	if _, ok := index["PATH"]; !ok {
		set("PATH", "PATH="+defaultPath)
	}
	if _, ok := index["HOSTNAME"]; !ok {
		if h, err := os.Hostname(); err == nil {
			set("HOSTNAME", "HOSTNAME="+h)
		}
	}
	return out
}

// containerUser combines the image's User ("name", "uid", "name:group",
// "uid:gid") with the security context, which wins.
func containerUser(imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (userSpec, error) {
	u, err := parseImageUser(imageUser)
	if err != nil {
		return userSpec{}, fmt.Errorf("image user %q: %w", imageUser, err)
	}
	if sc.GetRunAsUser() != nil {
		v := sc.GetRunAsUser().GetValue()
		u.uid, u.name = &v, ""
	} else if sc.GetRunAsUsername() != "" {
		u.uid, u.name = nil, sc.GetRunAsUsername()
	}
	if sc.GetRunAsGroup() != nil {
		v := sc.GetRunAsGroup().GetValue()
		u.gid, u.group = &v, ""
	}
	return userSpec{UID: u.uid, GID: u.gid, Name: u.name, Group: u.group, Groups: sc.GetSupplementalGroups()}, nil
}

type parsedUser struct {
	uid, gid    *int64
	name, group string
}

func parseImageUser(s string) (parsedUser, error) {
	var u parsedUser
	if s == "" {
		return u, nil
	}
	user, group, _ := strings.Cut(s, ":")
	if n, err := strconv.ParseInt(user, 10, 64); err == nil {
		if n < 0 {
			return u, fmt.Errorf("negative uid")
		}
		u.uid = &n
	} else {
		u.name = user
	}
	if group != "" {
		if n, err := strconv.ParseInt(group, 10, 64); err == nil {
			if n < 0 {
				return u, fmt.Errorf("negative gid")
			}
			u.gid = &n
		} else {
			u.group = group
		}
	}
	return u, nil
}

// prepareRootfs creates the container's writable layer: an overlay upper and
// work dir, or, where overlayfs cannot be mounted, a full copy of the
// image's merged layers.
func (r *Runtime) prepareRootfs(dir string, rf *rootfsRecord) error {
	r.overlayOnce.Do(func() {
		r.overlayOK = layerfs.OverlaySupported(r.images.TmpDir())
		if !r.overlayOK {
			r.log.Warn("overlayfs cannot be mounted here; containers from images get a copy of the image instead")
		}
	})
	base := rootfsDir(dir)
	rf.Copy = !r.overlayOK
	if rf.Copy {
		var layers []string
		for _, l := range rf.Layers {
			layers = append(layers, r.images.LayerPath(l))
		}
		return layerfs.Flatten(layers, filepath.Join(base, "merged"))
	}
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// rootfsSpecFor is the init's view of a container's root filesystem.
func (r *Runtime) rootfsSpecFor(dir string, rf *rootfsRecord) *rootfsSpec {
	base := rootfsDir(dir)
	spec := &rootfsSpec{Merged: filepath.Join(base, "merged"), Copy: rf.Copy, User: rf.User, Mounts: rf.Mounts, Caps: rf.Caps, ReadOnly: rf.ReadOnly}
	if !rf.Copy {
		spec.Upper, spec.Work = filepath.Join(base, "upper"), filepath.Join(base, "work")
		// overlayfs refuses a directory twice; a repeated layer (typically
		// the empty one) only matters at its topmost position.
		seen := map[string]bool{}
		for i := len(rf.Layers) - 1; i >= 0; i-- {
			if !seen[rf.Layers[i]] {
				seen[rf.Layers[i]] = true
				spec.Lower = append(spec.Lower, r.images.LayerPath(rf.Layers[i]))
			}
		}
	}
	return spec
}
