# minilet — build, test, lint, bench. `make test` is what CI runs.
GO ?= go
BIN := bin/minilet
LINT := $(shell $(GO) env GOPATH)/bin/golangci-lint

.PHONY: build test unit vet lint bench run cleanup install clean conformance host-test

# The agent starts container monitors from bin/minilet-monitor and enters
# containers for execs through bin/minilet-exec (both next to it). The exec
# helper is a freestanding C program (a C compiler is needed; without one the
# script builds a Go program that does the same at a higher CPU cost per exec).
# -buildvcs=auto stamps the commit `minilet version` prints, also where the
# environment's GOFLAGS turn VCS stamping off.
build:
	@echo "make: building bin/minilet, bin/minilet-monitor and bin/minilet-exec (the first build downloads and compiles the Go modules: several minutes of 'go: downloading'; later builds are cached)"
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/minilet
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

# make run starts the agent on the example pods, with ROOT as its root dir
# (state, keys, images; default /var/lib/minilet, readable by root only)
# and what it would otherwise share with other agents on the host below
# it where it can: the device-plugin dir and the CNI configuration. The
# cgroup root is CGROUP_ROOT; the host-wide IP pool of the default network
# (/var/lib/cni/networks/minilet), its bridge minilet0 and portmap's chains
# are shared by design. Pods off the host network need the CNI reference
# plugins: built (once, cached by version) by scripts/cni-plugins.sh, which
# installs iptables with apt-get if it is missing (MINILET_NO_INSTALL=1
# skips that) and prints the plugins' dir. `make cleanup` with the same
# ROOT and CGROUP_ROOT removes all of it again once the agent is stopped
# (see `minilet cleanup --help`).
PREFIX ?= /usr/local
ROOT ?= /var/lib/minilet
CGROUP_ROOT ?= /minilet
RUN_FLAGS = --root-dir $(ROOT) --cgroup-root $(CGROUP_ROOT) --device-plugin-dir $(ROOT)/device-plugins \
	--cni-conf-dir $(ROOT)/cni/net.d --pod-manifest-path examples/pods
run: build
	@echo "make run: the CNI plugins pods' networks need (scripts/cni-plugins.sh)"
	@dir="$$(./scripts/cni-plugins.sh | tail -n 1)" && \
		echo "make run: starting the agent: root dir $(ROOT), cgroup root $(CGROUP_ROOT), the pods of examples/pods (Ctrl-C stops the agent, the pods keep running; make cleanup removes them and everything the agent made)" && \
		exec ./$(BIN) run $(RUN_FLAGS) --cni-bin-dir "$$dir"

cleanup: build
	./$(BIN) cleanup --stop-pods $(RUN_FLAGS) --cni-bin-dir "$$(./scripts/cni-plugins.sh | tail -n 1)"

# minilet as a systemd service (deploy/systemd/minilet.service, configuration
# in /etc/minilet, state in /var/lib/minilet); DESTDIR and PREFIX as usual.
# On a running systemd it enables and (re)starts the service: run it again
# after a pull to upgrade in place (pods keep running and are adopted).
install: build
	DESTDIR=$(DESTDIR) PREFIX=$(PREFIX) ./scripts/install.sh

clean:
	rm -rf bin
