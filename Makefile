# minilet — build, test, lint, bench. `make test` is what CI runs.
GO ?= go
BIN := bin/minilet
LINT := $(shell $(GO) env GOPATH)/bin/golangci-lint

.PHONY: build test unit vet lint bench run clean conformance host-test

# The agent starts container monitors from bin/minilet-monitor and enters
# containers for execs through bin/minilet-exec (both next to it). The exec
# helper is a freestanding C program (a C compiler is needed; without one the
# script builds a Go program that does the same at a higher CPU cost per exec).
build:
	$(GO) build -o $(BIN) ./cmd/minilet
	$(GO) build -o bin/minilet-monitor ./cmd/minilet-monitor
	GO=$(GO) ./scripts/build-exec-helper.sh bin/minilet-exec

# The README's test command: vet, lint, and every test with the race
# detector. Root-only tests (cgroups, processes) run here because CI is root.
# scripts/test.sh runs the steps and overlaps the slow parts (see there).
test:
	GO=$(GO) MINILET_CLUSTER=$(MINILET_CLUSTER) CONTAINERD_STATE=$(CONTAINERD_STATE) ./scripts/test.sh vet lint unit

vet:
	$(GO) vet ./...

lint:
	./scripts/install-tools.sh
	$(LINT) run ./...

# Every test runs on both runtimes: the embedded one, and containerd through
# the CRI socket. scripts/containerd-up.sh installs and starts a private
# containerd (failing loudly if it cannot: CI must cover both runtimes);
# it is stopped afterwards, also when tests fail, keeping their status.
CONTAINERD_STATE ?= /tmp/minilet-containerd
# Cluster-mode tests run a real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) built from hack/cluster
# and cached in ~/.cache/minilet-cluster by content (a cold build costs
# about 30 CPU-minutes, seconds once cached; it starts first, in the
# background). 0 skips them.
MINILET_CLUSTER ?= 1

unit:
	GO=$(GO) MINILET_CLUSTER=$(MINILET_CLUSTER) CONTAINERD_STATE=$(CONTAINERD_STATE) ./scripts/test.sh unit

# The upstream e2e suite's [NodeConformance] specs against one minilet node
# of a real control plane (test/conformance), with the test images from a
# loopback registry. Not part of `make test`, which runs only the smoke set
# (test/conformance/smoke.txt) and only once these binaries are cached: the
# first run builds e2e.test, agnhost and ginkgo from hack/conformance (cached
# by content, like the control plane), and a full run takes hours. The JUnit report, results.md
# and the logs go to REPORT_DIR (default /tmp/minilet-conformance/...).
# FOCUS (a ginkgo regexp; default every [NodeConformance] spec), PROCS
# (parallel ginkgo processes, default 1) and TIMEOUT (default 3h) narrow it.
RUNTIME ?= embedded
conformance:
	command -v nc.openbsd >/dev/null || apt-get install -y -q netcat-openbsd
	MINILET_CONFORMANCE=1 MINILET_CONFORMANCE_RUNTIME=$(RUNTIME) \
		MINILET_CONFORMANCE_FOCUS='$(FOCUS)' MINILET_CONFORMANCE_SKIP='$(SKIP)' MINILET_CONFORMANCE_PROCS='$(PROCS)' \
		MINILET_CONFORMANCE_REPORT_DIR='$(REPORT_DIR)' MINILET_CONFORMANCE_TIMEOUT='$(TIMEOUT)' \
		$(GO) test -count=1 -v -timeout 6h -run '^TestNodeConformance$$' ./test/conformance/

# The real-hosts test bed (test/hosts, docs/hosts.md): node containers with
# systemd as PID 1 under systemd-nspawn. Root only. The first run on a
# machine installs mmdebstrap and systemd-container and builds the node
# image (about a minute, cached in ~/.cache/minilet-hosts); then 5-10 s.
host-test:
	$(GO) test -count=1 -v ./test/hosts/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 5x ./bench/

# Pods off the host network need the CNI reference plugins: built (once,
# cached by version) by scripts/cni-plugins.sh, which prints their dir.
run: build
	./$(BIN) run --pod-manifest-path examples/pods --root-dir /tmp/minilet \
		--cni-bin-dir "$$(./scripts/cni-plugins.sh | tail -n 1)"

clean:
	rm -rf bin
