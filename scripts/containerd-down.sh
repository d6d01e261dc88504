#!/usr/bin/env bash
# containerd-down.sh [STATE_DIR] — stop the containerd that
# scripts/containerd-up.sh started with STATE_DIR (default
# /tmp/minilet-containerd), kill its shims and containers, unmount and
# remove its state, its pod network bridge, and the empty cgroup
# directories its containers left. Idempotent; safe when nothing runs.
set -uo pipefail

STATE_DIR=${1:-/tmp/minilet-containerd}
if [ ! -d "$STATE_DIR" ]; then
	exit 0
fi
STATE_DIR=$(cd "$STATE_DIR" && pwd)
SOCK="$STATE_DIR/containerd.sock"
PIDFILE="$STATE_DIR/containerd.pid"
# The shared pod network's host-wide IP pool (see containerd-up.sh).
IPAM_DIR=/var/lib/cni/networks/minilet

say() { echo "containerd-down: $*" >&2; }

# Container and sandbox IDs this instance knows, for runc state and cgroups.
ids=$(
	{
		ls "$STATE_DIR/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null
		ls "$STATE_DIR/root/io.containerd.grpc.v1.cri/containers" 2>/dev/null
		ls "$STATE_DIR/root/io.containerd.grpc.v1.cri/sandboxes" 2>/dev/null
	} | grep -E '^[0-9a-f]{64}$' | sort -u
)

# 1. containerd itself.
pid=$(cat "$PIDFILE" 2>/dev/null || true)
if [ -n "$pid" ] && grep -qs "$STATE_DIR/config.toml" "/proc/$pid/cmdline"; then
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do # up to 10 s
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
fi

# 2. Shims of this instance (their command line names our socket), the
# containers they run, and everything in those containers' cgroups.
kill_cgroup_of() {
	local p=$1 line rel
	while IFS= read -r line; do
		rel=${line#*:*:}
		case "$line" in
		*:memory:*) ;;
		*) continue ;;
		esac
		[ "$rel" = / ] && return
		local procs="/sys/fs/cgroup/memory$rel/cgroup.procs"
		[ -f "$procs" ] || return
		while read -r q; do
			[ -n "$q" ] && [ "$q" -gt 1 ] && kill -KILL "$q" 2>/dev/null
		done <"$procs"
		return
	done <"/proc/$p/cgroup" 2>/dev/null
}
shims=()
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	cmd=$(tr "\\0" " " 2>/dev/null <"$d/cmdline") || continue
	case "$cmd" in
	*containerd-shim*"-address $SOCK "*) shims+=("$p") ;;
	esac
done
for s in "${shims[@]}"; do
	for c in $(cat "/proc/$s/task/"*/children 2>/dev/null); do
		kill_cgroup_of "$c"
		kill -KILL "$c" 2>/dev/null
	done
	kill -KILL "$s" 2>/dev/null
done
for s in "${shims[@]}"; do
	for _ in $(seq 1 50); do
		kill -0 "$s" 2>/dev/null || break
		sleep 0.1
	done
done

# 3. Mounts under the state dir (rootfs overlays, shm, netns), deepest first.
for _ in 1 2 3; do
	mounts=$(awk -v d="$STATE_DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
	[ -z "$mounts" ] && break
	for m in $mounts; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
done

# 4. runc's state (containerd 1.6 keeps it under /run/containerd/runc).
for id in $ids; do
	rm -rf "/run/containerd/runc/k8s.io/$id" 2>/dev/null
done

# 5. Empty cgroup directories named after our containers and sandboxes.
if [ -n "$ids" ]; then
	pattern=$(echo "$ids" | paste -sd'|')
	find /sys/fs/cgroup -mindepth 2 -maxdepth 12 -type d 2>/dev/null | grep -E "/($pattern)$" | sort -r | while read -r cg; do
		rmdir "$cg" 2>/dev/null || true
	done
fi

# 6. IPs our sandboxes still hold in the shared pool (normally released by
# CNI DEL when the tests remove their pods), and the state itself. The
# bridge is shared with the embedded runtime's pods and stays.
if [ -n "$ids" ] && [ -d "$IPAM_DIR" ]; then
	for f in "$IPAM_DIR"/*; do
		[ -f "$f" ] || continue
		owner=$(head -n 1 "$f" 2>/dev/null | tr -d '[:space:]')
		if [ -n "$owner" ] && grep -qx -- "$owner" <<<"$ids"; then
			rm -f "$f"
		fi
	done
fi
rm -rf "$STATE_DIR" 2>/dev/null || {
	sleep 1
	rm -rf "$STATE_DIR" || say "could not remove $STATE_DIR entirely"
}
exit 0
