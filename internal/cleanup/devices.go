package cleanup

import (
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/hostlock"
)

// removeDevicePluginFiles removes the agent's files from the device-plugin
// directory (its lock, its registration socket if nobody answers on it,
// its checkpoint), and the directory itself once empty (with
// /var/lib/kubelet for the default one, if nothing else is there). An
// agent still holding the directory's lock keeps all of it.
func removeDevicePluginFiles(cfg Config, rep *Report) {
	dir := cfg.DevicePluginDir
	if dir == "" || !exists(dir) {
		return
	}
	if err := hostlock.Remove(filepath.Join(dir, devicemanager.LockName)); err != nil {
		rep.left("device-plugin dir %s: %v", dir, err)
		return
	}
	sock := filepath.Join(dir, devicemanager.KubeletSocket)
	if exists(sock) {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			_ = c.Close()
			rep.left("%s: a process answers on it (a kubelet?)", sock)
		} else {
			remove(rep, sock, "registration socket")
		}
	}
	remove(rep, filepath.Join(dir, devicemanager.CheckpointName), "device checkpoint")
	stop := filepath.Dir(dir)
	if strings.HasPrefix(dir, "/var/lib/kubelet/") {
		stop = "/var/lib"
	}
	removeEmptyDirs(dir, stop)
	if !exists(dir) {
		rep.removed("device-plugin dir %s", dir)
	}
}
