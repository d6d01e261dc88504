#!/usr/bin/env bash
# Builds the embedded runtime's exec helper at $1 (bin/minilet-exec for
# `make build`; the test harness and tests call this too): the freestanding
# C program of cmd/minilet-exec/csrc when the C compiler ($CC, default cc)
# builds it for this machine (x86-64 or arm64), else, with a warning, the
# Go program of cmd/minilet-exec, which does the same job at a Go program's
# start-up cost (1.5-4 ms of CPU) per exec. MINILET_EXEC_HELPER=c makes the
# C build mandatory, =go skips it.
set -euo pipefail
out=${1:?usage: build-exec-helper.sh OUTPUT}
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${MINILET_EXEC_HELPER:-auto}
if [[ $mode != go ]]; then
	# -nostdlib: no C library at all (its start-up is what this avoids);
	# -no-pie: no relocations to apply; no stack protector (no TLS).
	if "${CC:-cc}" -O2 -Wall -Werror -static -nostdlib -no-pie -ffreestanding -fno-builtin \
		-fno-stack-protector -fno-tree-loop-distribute-patterns -fno-asynchronous-unwind-tables \
		-o "$out" "$root/cmd/minilet-exec/csrc/exec.c"; then
		exit 0
	fi
	if [[ $mode == c ]]; then
		echo "build-exec-helper: the C exec helper did not build (MINILET_EXEC_HELPER=c)" >&2
		exit 1
	fi
	echo "build-exec-helper: the C exec helper did not build; building the Go one (slower per exec)" >&2
fi
# No cgo either: the Go helper needs none, and there may be no C compiler.
cd "$root" && CGO_ENABLED=0 "${GO:-go}" build -o "$out" ./cmd/minilet-exec
