#!/usr/bin/env bash
# Installs the tools `make lint` needs into $(go env GOPATH)/bin.
set -euo pipefail
want=v2.15.0
bin="$(go env GOPATH)/bin/golangci-lint"
if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -F -- "${want#v}" >/dev/null; then
  exit 0
fi
GOFLAGS=-mod=mod go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${want}"
