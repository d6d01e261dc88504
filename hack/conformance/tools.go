//go:build tools

// Package conformance pins what `go test -c k8s.io/kubernetes/test/e2e`,
// the agnhost test image and the ginkgo CLI need, so that `go mod tidy`
// keeps them in this module's go.mod. Nothing imports it: the build tag
// keeps it out of every build (main packages cannot be imported anyway).
package conformance

import (
	// The ginkgo CLI, to run e2e.test with several processes (-p).
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	// The e2e suite itself (e2e.test is its test binary); its _test.go
	// imports are listed too, since tidy does not follow the tests of
	// dependencies.
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/e2e/apimachinery"
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/architecture"
	_ "k8s.io/kubernetes/test/e2e/auth"
	_ "k8s.io/kubernetes/test/e2e/autoscaling"
	_ "k8s.io/kubernetes/test/e2e/common"
	_ "k8s.io/kubernetes/test/e2e/dra"
	_ "k8s.io/kubernetes/test/e2e/feature"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/e2e/framework/testfiles"
	_ "k8s.io/kubernetes/test/e2e/instrumentation"
	_ "k8s.io/kubernetes/test/e2e/invariants"
	_ "k8s.io/kubernetes/test/e2e/invariants/logcheck"
	_ "k8s.io/kubernetes/test/e2e/kubectl"
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/e2e/node"
	_ "k8s.io/kubernetes/test/e2e/scheduling"
	_ "k8s.io/kubernetes/test/e2e/storage"
	_ "k8s.io/kubernetes/test/e2e/storage/csimock"
	_ "k8s.io/kubernetes/test/e2e/storage/external"
	_ "k8s.io/kubernetes/test/e2e/windows"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
	// The agnhost test image's binary.
	_ "k8s.io/kubernetes/test/images/agnhost"
)
