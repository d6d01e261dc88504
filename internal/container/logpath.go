package container

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// The kubelet's container log layout, which the runtime manager writes and
// the logs API reads: root/<namespace>_<pod>_<uid>/<container>/<attempt>.log.

// PodLogDir is a pod's log directory under root.
func PodLogDir(root, namespace, name, uid string) string {
	return filepath.Join(root, fmt.Sprintf("%s_%s_%s", namespace, name, uid))
}

// ContainerLogFile is a container attempt's log path relative to its pod's
// log directory.
func ContainerLogFile(name string, attempt int) string {
	return filepath.Join(name, strconv.Itoa(attempt)+".log")
}
