// Package spec resolves what a container of the embedded runtime runs from
// its CRI config and, for a container from an image, the image's config:
// command, environment, working directory, and how it is isolated (user,
// capabilities, mounts, read-only root). The securityContext is read here;
// the container init (monitorproc) enforces it.
package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Process is what a container runs.
type Process struct {
	Args       []string
	Env        []string
	WorkingDir string
	// Rootfs isolates a container from an image; nil for the host image.
	Rootfs *supervisor.Rootfs
	// Mounts are a host-image container's mounts (an image's are in
	// Rootfs).
	Mounts []monitorproc.BindMount
	// Security is how the container is confined, whatever its image.
	Security *monitorproc.Security
}

// FromHost resolves a container on the host image (the host's root
// filesystem): its command and args, which it must have, its environment
// with the PATH and HOSTNAME an image would provide (HOME is the user's,
// set by the container init), its mounts and its security context, which
// applies as to any image (users and groups from the host's /etc/passwd
// and /etc/group). A mount's propagation is private unless it asks for
// host-to-container; bidirectional gets host-to-container too, since the
// container's mounts never reach the host.
func FromHost(config *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (Process, error) {
	args := append(append([]string{}, config.GetCommand()...), config.GetArgs()...)
	if len(args) == 0 {
		return Process{}, errors.New("field command is required (the host image has no default command)")
	}
	mounts, err := bindMounts(config.GetMounts())
	if err != nil {
		return Process{}, err
	}
	for i, m := range config.GetMounts() {
		mounts[i].HostToContainer = m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	}
	sc := config.GetLinux().GetSecurityContext()
	user, err := containerUser("", sc)
	if err != nil {
		return Process{}, err
	}
	sec, err := security(sc, user, sandbox)
	if err != nil {
		return Process{}, err
	}
	env := hostEnv(config.GetEnvs())
	if sec.Privileged && user.UID == nil && user.GID == nil && user.Name == "" && len(user.Groups) == 0 &&
		!sec.NoNewPrivs && !sec.ReadOnlyRoot && len(sec.Sysctls) == 0 {
		// Nothing to enforce: root with every capability, as the host
		// runs it.
		sec = nil
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
			env = append(env, "HOME=/root")
		}
	}
	return Process{Args: args, Env: env, WorkingDir: config.GetWorkingDir(), Mounts: mounts, Security: sec}, nil
}

// bindMounts are the CRI mounts as the container init takes them.
func bindMounts(ms []*runtimeapi.Mount) ([]monitorproc.BindMount, error) {
	var out []monitorproc.BindMount
	for _, m := range ms {
		if m.GetContainerPath() == "" || m.GetHostPath() == "" {
			return nil, fmt.Errorf("field mounts: container_path and host_path are required")
		}
		out = append(out, monitorproc.BindMount{Source: m.GetHostPath(), Target: m.GetContainerPath(), ReadOnly: m.GetReadonly()})
	}
	return out, nil
}

// FromImage resolves a container from a stored image: its command
// (Kubernetes rules: command replaces the Entrypoint and drops Cmd; args
// replaces Cmd), environment (image Env, overridden per key by the
// container's), working directory, and its root filesystem: the image's
// layers, user, capabilities and mounts. Errors name the config field.
func FromImage(img *imagestore.Record, config *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (Process, error) {
	entry, cmd := img.Config.Entrypoint, img.Config.Cmd
	if len(config.GetCommand()) > 0 {
		entry, cmd = config.GetCommand(), config.GetArgs()
	} else if len(config.GetArgs()) > 0 {
		cmd = config.GetArgs()
	}
	args := append(append([]string{}, entry...), cmd...)
	if len(args) == 0 {
		return Process{}, fmt.Errorf("field command is empty and image %s has neither Entrypoint nor Cmd", img.ID)
	}
	env := mergeEnv(img.Config.Env, config.GetEnvs())
	workDir := config.GetWorkingDir()
	if workDir == "" {
		workDir = img.Config.WorkingDir
	}
	if workDir == "" {
		workDir = "/"
	}
	if !filepath.IsAbs(workDir) {
		return Process{}, fmt.Errorf("field workingDir %q is not absolute", workDir)
	}
	user, err := containerUser(img.Config.User, config.GetLinux().GetSecurityContext())
	if err != nil {
		return Process{}, err
	}
	sec, err := security(config.GetLinux().GetSecurityContext(), user, sandbox)
	if err != nil {
		return Process{}, err
	}
	rf := &supervisor.Rootfs{Layers: append([]string(nil), img.Layers...)}
	if rf.Mounts, err = bindMounts(config.GetMounts()); err != nil {
		return Process{}, err
	}
	// Devices (from device plugins) are their host nodes bound in place.
	for _, d := range config.GetDevices() {
		if d.GetContainerPath() == "" || d.GetHostPath() == "" {
			return Process{}, fmt.Errorf("field devices: container_path and host_path are required")
		}
		rf.Mounts = append(rf.Mounts, monitorproc.BindMount{Source: d.GetHostPath(), Target: d.GetContainerPath(), ReadOnly: !strings.Contains(d.GetPermissions(), "w") && d.GetPermissions() != ""})
	}
	return Process{Args: args, Env: env, WorkingDir: workDir, Rootfs: rf, Security: sec}, nil
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
		set("PATH", "PATH="+monitorproc.DefaultPath)
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
func containerUser(imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (monitorproc.UserSpec, error) {
	u, err := parseImageUser(imageUser)
	if err != nil {
		return monitorproc.UserSpec{}, fmt.Errorf("image user %q: %w", imageUser, err)
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
	return monitorproc.UserSpec{UID: u.uid, GID: u.gid, Name: u.name, Group: u.group, Groups: sc.GetSupplementalGroups()}, nil
}

// ImageUserID is the uid an image's User ("uid", "uid:gid") names, if it
// names one by number.
func ImageUserID(user string) (int64, bool) {
	u, err := parseImageUser(user)
	if err != nil || u.uid == nil {
		return 0, false
	}
	return *u.uid, true
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
	var err error
	if u.uid, u.name, err = idOrName(user, "uid"); err != nil {
		return u, err
	}
	if group != "" {
		u.gid, u.group, err = idOrName(group, "gid")
	}
	return u, err
}

// idOrName reads one half of an image's User: a number (what: uid or gid)
// or a name.
func idOrName(s, what string) (*int64, string, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return nil, s, nil
	case n < 0:
		return nil, "", fmt.Errorf("negative %s", what)
	}
	return &n, "", nil
}

// hostEnv turns CRI env vars into KEY=VALUE, adding the PATH and HOSTNAME
// an image would normally provide.
func hostEnv(kvs []*runtimeapi.KeyValue) []string {
	var env []string
	has := map[string]bool{}
	for _, kv := range kvs {
		env = append(env, kv.GetKey()+"="+string(kv.GetValue()))
		has[kv.GetKey()] = true
	}
	if !has["PATH"] {
		env = append(env, "PATH="+monitorproc.DefaultPath)
	}
	if !has["HOSTNAME"] {
		if h, err := os.Hostname(); err == nil {
			env = append(env, "HOSTNAME="+h)
		}
	}
	return env
}
