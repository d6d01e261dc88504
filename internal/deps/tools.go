//go:build tools

// Package deps pins the libraries the agent is built from while their
// packages are still being written, so go mod tidy keeps them.
package deps

import (
	_ "github.com/containerd/cgroups/v3"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-containerregistry/pkg/v1"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_model/go"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/health"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/cri-api/pkg/apis"
	_ "k8s.io/cri-client/pkg"
	_ "k8s.io/kubelet/config/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/podresources/v1"
	_ "k8s.io/utils/clock"
	_ "sigs.k8s.io/yaml"
)
