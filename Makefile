# minilet — build, test, lint, bench. `make test` is what CI runs.
GO ?= go
BIN := bin/minilet
LINT := $(shell $(GO) env GOPATH)/bin/golangci-lint

.PHONY: build test unit vet lint bench run clean

# The agent starts container monitors from bin/minilet-monitor (next to it).
build:
	$(GO) build -o $(BIN) ./cmd/minilet
	$(GO) build -o bin/minilet-monitor ./cmd/minilet-monitor

# The README's test command: vet, lint, and every test with the race
# detector. Root-only tests (cgroups, processes) run here because CI is root.
test: vet lint unit

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
# Cluster-mode tests build kube-apiserver and etcd (hack/cluster, cached in
# ~/.cache/minilet-cluster; a cold build measured 7-27 min on 2 cores
# depending on load, seconds once cached). 0 skips them.
MINILET_CLUSTER ?= 1

unit:
	@ep=$$(./scripts/containerd-up.sh $(CONTAINERD_STATE) | tail -n 1); \
	case "$$ep" in unix://*) ;; *) echo "make unit: containerd could not be started (see above); the containerd tests cannot run" >&2; ./scripts/containerd-down.sh $(CONTAINERD_STATE); exit 1 ;; esac; \
	trap './scripts/containerd-down.sh $(CONTAINERD_STATE)' EXIT; \
	trap 'exit 130' INT TERM; \
	echo "make unit: containerd at $$ep"; \
	MINILET_CLUSTER=$(MINILET_CLUSTER) MINILET_CONTAINERD_ENDPOINT=$$ep $(GO) test -race -count=1 -timeout 40m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 5x ./bench/

run: build
	./$(BIN) run --pod-manifest-path examples/pods --root-dir /tmp/minilet

clean:
	rm -rf bin
