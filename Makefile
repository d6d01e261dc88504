# minilet — build, test, lint, bench. `make test` is what CI runs.
GO ?= go
BIN := bin/minilet
LINT := $(shell $(GO) env GOPATH)/bin/golangci-lint

.PHONY: build test unit vet lint bench run clean

build:
	$(GO) build -o $(BIN) ./cmd/minilet

# The README's test command: vet, lint, and every test with the race
# detector. Root-only tests (cgroups, processes) run here because CI is root.
test: vet lint unit

vet:
	$(GO) vet ./...

lint:
	./scripts/install-tools.sh
	$(LINT) run ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 5x ./bench/

run: build
	./$(BIN) run --pod-manifest-path examples/pods --root-dir /tmp/minilet

clean:
	rm -rf bin
