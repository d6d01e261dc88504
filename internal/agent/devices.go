package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/lifecycle"
)

// devicePluginWait is how long, after a device plugin went away (or the
// agent started without it), a new pod asking for its resource waits
// for it to register again before admission fails. Pods that hold their
// devices already never wait.
const devicePluginWait = 30 * time.Second

// criPodUIDLabel is the CRI label carrying a container's pod UID.
const criPodUIDLabel = "io.kubernetes.pod.uid"

// containerLister is the runtime's container listing.
type containerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// newDevices builds the device manager: it frees a pod's devices only
// once the runtime shows none of its containers left running.
func newDevices(cfg *config.Config, pods *lifecycle.Pods, cri containerLister, recorder events.Recorder, clk clock.PassiveClock, log *slog.Logger) (*devicemanager.Manager, error) {
	dm, err := devicemanager.New(devicemanager.Config{
		PluginDir:          cfg.DevicePluginDir,
		Owner:              cfg.RootDir,
		PodResourcesSocket: filepath.Join(cfg.RootDir, "pod-resources", "kubelet.sock"),
		PluginWait:         devicePluginWait,
		Running:            runningPods(cri),
		Recorder:           recorder,
		Node:               nodeObject(cfg.NodeName),
	}, devicemanager.PodListerFunc(pods.Active), clk, log)
	if err != nil {
		return nil, fmt.Errorf("--device-plugin-dir: %w", err)
	}
	return dm, nil
}

// runningPods answers from the runtime which pods have containers that
// are not exited.
func runningPods(cri containerLister) devicemanager.RunningPods {
	return devicemanager.RunningPodsFunc(func(ctx context.Context) (sets.Set[types.UID], error) {
		cs, err := cri.ListContainers(ctx, nil)
		if err != nil {
			return nil, err
		}
		out := sets.New[types.UID]()
		for _, c := range cs {
			if c.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
			if uid := c.GetLabels()[criPodUIDLabel]; uid != "" {
				out.Insert(types.UID(uid))
			}
		}
		return out, nil
	})
}
