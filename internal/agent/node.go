package agent

import (
	"os"
	"runtime"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Version is the kubelet version minilet reports (the API it follows).
var Version = "v1.37.1-minilet"

// nodeConditions remembers when each condition last changed.
type nodeConditions struct {
	since map[v1.NodeConditionType]time.Time
	last  map[v1.NodeConditionType]v1.ConditionStatus
}

// buildNode assembles the Node object served at /node (and, in cluster
// mode, sent to the API server).
func (a *Agent) buildNode() *v1.Node {
	now := a.clock.Now()
	capacity := a.cgroups.Capacity()
	allocatable := a.cgroups.Allocatable()
	ready, readyMsg := a.readiness()
	conds := []struct {
		typ             v1.NodeConditionType
		status          v1.ConditionStatus
		reason, message string
	}{
		{v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
	}
	memory, disk, pid := a.eviction.Conditions()
	if memory {
		conds[0].status, conds[0].reason, conds[0].message = v1.ConditionTrue, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"
	}
	if disk {
		conds[1].status, conds[1].reason, conds[1].message = v1.ConditionTrue, "KubeletHasDiskPressure", "kubelet has disk pressure"
	}
	if pid {
		conds[2].status, conds[2].reason, conds[2].message = v1.ConditionTrue, "KubeletHasInsufficientPID", "kubelet has insufficient PID available"
	}
	if !ready {
		conds[3].status, conds[3].reason, conds[3].message = v1.ConditionFalse, "KubeletNotReady", readyMsg
	}
	a.nodeMu.Lock()
	var conditions []v1.NodeCondition
	for _, c := range conds {
		if a.nodeConds.last[c.typ] != c.status {
			a.nodeConds.last[c.typ] = c.status
			a.nodeConds.since[c.typ] = now
		}
		conditions = append(conditions, v1.NodeCondition{
			Type: c.typ, Status: c.status, Reason: c.reason, Message: c.message,
			LastHeartbeatTime:  metav1.NewTime(now),
			LastTransitionTime: metav1.NewTime(a.nodeConds.since[c.typ]),
		})
	}
	a.nodeMu.Unlock()

	kernel, osImage := kernelVersion(), osImage()
	return &v1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              a.cfg.NodeName,
			CreationTimestamp: metav1.NewTime(a.startedAt),
			Labels: map[string]string{
				"kubernetes.io/hostname":  a.cfg.NodeName,
				"kubernetes.io/os":        runtime.GOOS,
				"kubernetes.io/arch":      runtime.GOARCH,
				"beta.kubernetes.io/os":   runtime.GOOS,
				"beta.kubernetes.io/arch": runtime.GOARCH,
			},
		},
		Status: v1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Phase:       v1.NodeRunning,
			Conditions:  conditions,
			Addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: a.addrs.IP},
				{Type: v1.NodeHostName, Address: a.addrs.Hostname},
			},
			DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: int32(a.port)}},
			NodeInfo: v1.NodeSystemInfo{
				MachineID:               readTrim("/etc/machine-id"),
				BootID:                  readTrim("/proc/sys/kernel/random/boot_id"),
				KernelVersion:           kernel,
				OSImage:                 osImage,
				ContainerRuntimeVersion: a.runtimeVersion,
				KubeletVersion:          Version,
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
			},
		},
	}
}

// readiness is the node's Ready condition: the runtime answers and PLEG
// relisted recently.
func (a *Agent) readiness() (bool, string) {
	if ok, since := a.pleg.Healthy(); !ok {
		return false, "PLEG is not healthy: pleg was last seen active " + since.Round(time.Second).String() + " ago"
	}
	if err := a.runtimeErr(); err != nil {
		return false, "container runtime is down: " + err.Error()
	}
	return true, ""
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func kernelVersion() string { return readTrim("/proc/sys/kernel/osrelease") }

func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}
