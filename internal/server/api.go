package server

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The providers the server reads from. Each is optional: a nil provider
// makes its endpoint answer 404 "not enabled".

// PodLister lists the pods the agent runs, with their status.
type PodLister interface {
	Pods() []v1.Pod
}

// NodeGetter returns the node object (capacity, allocatable, conditions).
type NodeGetter interface {
	Node() *v1.Node
}

// EventLister lists recorded events; an empty namespace and name mean all
// events, otherwise those whose involved object is that pod.
type EventLister interface {
	Events(namespace, name string) ([]v1.Event, error)
}

// LogLocator finds the CRI log file of a container: the current instance,
// or with previous the one before the last restart. Unknown pods or
// containers are errors wrapping errdefs.ErrNotFound.
type LogLocator interface {
	ContainerLogPath(namespace, pod, container string, previous bool) (string, error)
}

// ContainerRunningChecker tells whether a container is running now; a
// followed log of a container that is not running ends at the end of its
// file instead of waiting forever.
type ContainerRunningChecker interface {
	ContainerRunning(namespace, pod, container string) bool
}

// SummaryProvider returns the kubelet Summary API statistics.
type SummaryProvider interface {
	Summary(ctx context.Context) (*statsapi.Summary, error)
}

// DeviceLister lists the devices registered by device plugins.
type DeviceLister interface {
	Devices() []Device
}

// ImageLister lists the images the runtime holds.
type ImageLister interface {
	Images(ctx context.Context) ([]Image, error)
}

// Device is one device a device plugin advertises, as served by GET /devices.
type Device struct {
	// Resource is the extended resource name, e.g. "example.com/gpu".
	Resource string `json:"resource"`
	// ID is the device's ID as the plugin reports it.
	ID string `json:"id"`
	// Health is "Healthy" or "Unhealthy".
	Health string `json:"health"`
	// Pod is "NAMESPACE/NAME" of the pod the device is allocated to, if any.
	Pod string `json:"pod,omitempty"`
	// Container is the container the device is allocated to, if any.
	Container string `json:"container,omitempty"`
}

// DeviceList is the body of GET /devices.
type DeviceList struct {
	Items []Device `json:"items"`
}

// Image is one image, as served by GET /images.
type Image struct {
	ID            string    `json:"id"`
	RepoTags      []string  `json:"repoTags"`
	RepoDigests   []string  `json:"repoDigests"`
	Size          uint64    `json:"size"`
	Pinned        bool      `json:"pinned"`
	FirstDetected time.Time `json:"firstDetected,omitzero"`
	LastUsed      time.Time `json:"lastUsed,omitzero"`
}

// ImageList is the body of GET /images.
type ImageList struct {
	Items []Image `json:"items"`
}
