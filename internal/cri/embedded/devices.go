package embedded

import (
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// checkDevices refuses, with an error naming the container and the
// device, what the embedded runtime cannot give a container rather than
// starting it without: CDI devices (it has no CDI resolver; use
// containerd), and on a host image a device node that would not be at
// the path asked for (such a container sees the host's own /dev, so a
// device whose container path is its host path is there, any other is
// not).
func checkDevices(config *runtimeapi.ContainerConfig, podNS, podName string, hostImg bool) error {
	name := config.GetMetadata().GetName()
	if cdi := config.GetCDIDevices(); len(cdi) > 0 {
		names := make([]string, len(cdi))
		for i, d := range cdi {
			names[i] = d.GetName()
		}
		return errInvalid("CreateContainer %q in pod %s/%s: field cdiDevices (%s): the embedded runtime cannot apply CDI devices; run the pod on a CRI runtime with CDI (--container-runtime-endpoint)",
			name, podNS, podName, strings.Join(names, ", "))
	}
	if !hostImg {
		return nil
	}
	var missing []string
	for _, d := range config.GetDevices() {
		if d.GetContainerPath() != d.GetHostPath() {
			missing = append(missing, fmt.Sprintf("%s (host %s)", d.GetContainerPath(), d.GetHostPath()))
		}
	}
	if len(missing) > 0 {
		return errInvalid("CreateContainer %q in pod %s/%s: field devices: a host-image container sees the host's /dev and cannot get device nodes at other paths: %s; use an image, or a device plugin that gives devices at their host path",
			name, podNS, podName, strings.Join(missing, ", "))
	}
	return nil
}
