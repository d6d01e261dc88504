#!/usr/bin/env bash
# cni-plugins.sh — build the CNI reference plugins minilet's pod networking
# uses (bridge, host-local, loopback, portmap, from
# github.com/containernetworking/plugins at the version below) and print
# the directory holding them as the last line of output.
#
# The build is cached by version in ${MINILET_CNI_CACHE:-~/.cache/minilet-cni}
# (about 20 s cold, nothing when cached); concurrent callers wait on a lock.
# The plugins need iptables (portmap, the bridge's masquerading): installed
# from the distribution's packages when missing, saying so first;
# MINILET_NO_INSTALL=1 installs nothing (host ports then fail until
# iptables is installed).
set -euo pipefail

VERSION=v1.10.0
PLUGINS=(plugins/main/bridge plugins/ipam/host-local plugins/main/loopback plugins/meta/portmap)
GO=${GO:-go}
CACHE=${MINILET_CNI_CACHE:-${HOME:-/root}/.cache/minilet-cni}
DIR="$CACHE/$VERSION"

say() { echo "cni-plugins: $*" >&2; }

if ! command -v iptables >/dev/null 2>&1 && [ "${MINILET_NO_INSTALL:-0}" = 1 ]; then
	say "WARNING: iptables is missing and MINILET_NO_INSTALL=1: not installing it; host ports and the pods' masquerading will fail (apt-get install iptables)"
elif ! command -v iptables >/dev/null 2>&1; then
	say "iptables is missing (portmap and the bridge's masquerading need it): installing Debian's iptables package with apt-get (MINILET_NO_INSTALL=1 skips this)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=120 update -qq >&2 &&
		apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends iptables >&2 ||
		say "WARNING: could not install iptables; host ports and masquerading will fail"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
complete=1
for p in "${PLUGINS[@]}"; do
	[ -x "$DIR/$(basename "$p")" ] || complete=0
done
if [ $complete = 0 ]; then
	say "building the CNI reference plugins (${PLUGINS[*]##*/}) at $VERSION from the Go module proxy into $DIR (about 20 s once; cached by version)"
	rm -rf "$DIR.tmp"
	mkdir -p "$DIR.tmp"
	pkgs=()
	for p in "${PLUGINS[@]}"; do
		pkgs+=("github.com/containernetworking/plugins/$p@$VERSION")
	done
	# Outside any module, so that the plugins' own go.mod decides.
	(cd "$DIR.tmp" && GOBIN="$DIR.tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" install "${pkgs[@]}") >&2
	rm -rf "$DIR"
	mv "$DIR.tmp" "$DIR"
fi
echo "$DIR"
