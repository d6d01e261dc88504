#!/usr/bin/env bash
# hosts-image.sh — build the root filesystem of the test bed's node
# containers (test/hosts) and print the directory holding it, extracted,
# as the last line of output. Nodes boot it with systemd as PID 1 under
# systemd-nspawn, each on an overlay of its own on top of that directory.
#
# The image is Debian 12 (bookworm): its systemd (252) still runs on the
# cgroup v1 hierarchies our CI machines mount. mmdebstrap builds it from the
# Debian archive apt already uses (read from /etc/apt/sources.list*, never a
# hard-coded host), in about a minute. The result is cached in
# ${MINILET_HOSTS_CACHE:-~/.cache/minilet-hosts}/<key>, the key a hash of
# what builds it (suite, package list, build function), so changing those
# builds a new image and a second run reuses the old one in no time;
# concurrent callers wait on a lock.
#
# Installs, when missing, from the distribution's packages: mmdebstrap (the
# image builder) and systemd-container (systemd-nspawn, which runs the nodes).
set -euo pipefail

SUITE=bookworm
# What a node needs to boot systemd and be a node: udev and kmod for systemd's
# own units, dbus for systemctl, iproute2 and ping to look at the network,
# procps for ps and free, iptables for the bridge CNI plugin pods off the
# host network use (minilet runs in the nodes).
PACKAGES=systemd-sysv,udev,dbus,kmod,iproute2,iputils-ping,procps,iptables

CACHE=${MINILET_HOSTS_CACHE:-${HOME:-/root}/.cache/minilet-hosts}
say() { echo "hosts-image: $*" >&2; }

install_tools() {
	local missing=()
	command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
	command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
	[ ${#missing[@]} = 0 ] && return
	say "installing ${missing[*]} (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# shellcheck source=lib/apt-mirror.sh
source "$(dirname "$0")/lib/apt-mirror.sh"

build() {
	local dir=$1 uri
	uri=$(mirror | head -n 1)
	if [ -z "$uri" ]; then
		say "no apt source for $SUITE in /etc/apt/sources.list*; cannot build the node image"
		exit 1
	fi
	say "building the node image: mmdebstrap --variant=minbase --include=$PACKAGES $SUITE from $uri (about a minute, cached afterwards in $dir)"
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	local start=$SECONDS
	nice -n 10 mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
		"$SUITE" "$dir.tmp/rootfs" "deb $uri $SUITE main" >&2
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	say "built in $((SECONDS - start)) s: $dir"
}

install_tools
# The key is what builds the image (the suite, the package list and the
# build function), so that editing the rest of this script costs no rebuild.
key=$({ echo "$SUITE $PACKAGES"; declare -f build; } | sha256sum | cut -c1-16)
dir="$CACHE/$key"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -d "$dir/rootfs" ]; then
	say "using the cached node image in $dir"
else
	build "$dir"
fi
echo "$dir/rootfs"
