#!/usr/bin/env bash
# containerd-up.sh [STATE_DIR] — start a private containerd for minilet's
# tests and benchmarks, and print its CRI endpoint (unix://...) as the last
# line of output.
#
# Idempotent: when the containerd of STATE_DIR already answers, it only makes
# sure the test images are there. On a fresh Debian machine (root, no
# systemd) it installs what it needs from the distribution's packages:
# containerd, runc, busybox-static and python3-minimal (and, through
# scripts/cni-plugins.sh, the CNI reference plugins and iptables).
#
# Everything containerd writes lives under STATE_DIR (default
# /tmp/minilet-containerd): root, state, sockets and CNI config (the IP
# pool is the host-wide one of the shared network).
# (containerd 1.6 still puts runc's state under /run/containerd/runc.)
# Images built locally, with no registry:
#   minilet.test/pause:latest   the sandbox image, a static program that waits for a signal
#   minilet.test/busybox:latest Debian's busybox-static with its applet links
#   minilet.test/python:latest  busybox plus Debian's minimal python3
# scripts/containerd-down.sh STATE_DIR undoes all of it.
set -euo pipefail

STATE_DIR=${1:-/tmp/minilet-containerd}
mkdir -p "$STATE_DIR"
STATE_DIR=$(cd "$STATE_DIR" && pwd)
SOCK="$STATE_DIR/containerd.sock"
LOG="$STATE_DIR/containerd.log"
PIDFILE="$STATE_DIR/containerd.pid"
# Pods are attached to the network the embedded runtime writes by default
# (internal/cri/embedded/podnet/default.conflist: bridge minilet0, one
# host-wide IP pool) with the reference plugins scripts/cni-plugins.sh
# builds, so that both runtimes give pods the same network.
REPO=$(cd "$(dirname "$0")/.." && pwd)

say() { echo "containerd-up: $*" >&2; }
die() {
	say "ERROR: $*"
	if [ -f "$LOG" ]; then
		say "last lines of $LOG:"
		tail -n 40 "$LOG" >&2 || true
	fi
	exit 1
}

# --- 1. packages -----------------------------------------------------------
need=()
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v ctr >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)
[ -x /usr/bin/python3 ] || need+=(python3-minimal)
if [ ${#need[@]} -gt 0 ]; then
	say "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	ok=0
	for attempt in 1 2 3 4; do
		# Wait for a dpkg lock another installer holds rather than fail.
		if apt-get -o DPkg::Lock::Timeout=120 update -qq >&2 &&
			apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "${need[@]}" >&2; then
			ok=1
			break
		fi
		say "apt-get failed (attempt $attempt); retrying"
		sleep $((attempt * 3))
	done
	[ $ok = 1 ] || die "could not install ${need[*]}"
fi
for bin in containerd ctr runc; do
	command -v $bin >/dev/null 2>&1 || die "$bin is missing after install"
done

CTR=(ctr --address "$SOCK")

answers() { "${CTR[@]}" version >/dev/null 2>&1; }

cri_ok() {
	"${CTR[@]}" plugins ls 2>/dev/null | awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" && $NF == "ok" { found = 1 } END { exit !found }'
}

# --- 2. config and start ---------------------------------------------------
if ! answers; then
	mkdir -p "$STATE_DIR/root" "$STATE_DIR/state" "$STATE_DIR/cni" "$STATE_DIR/opt"
	# A containerd of ours that does not answer is stuck: end it first.
	if [ -f "$PIDFILE" ]; then
		old=$(cat "$PIDFILE" 2>/dev/null || true)
		if [ -n "$old" ] && grep -qs "$STATE_DIR/config.toml" "/proc/$old/cmdline"; then
			say "stopping unresponsive containerd $old"
			kill -KILL "$old" 2>/dev/null || true
		fi
	fi
	rm -f "$SOCK" "$SOCK.ttrpc"

	CNI_BIN_DIR=$("$REPO/scripts/cni-plugins.sh" | tail -n 1)
	rm -f "$STATE_DIR"/cni/*
	cp "$REPO/internal/cri/embedded/podnet/default.conflist" "$STATE_DIR/cni/10-minilet.conflist"

	cat >"$STATE_DIR/config.toml" <<EOF
version = 2
root = "$STATE_DIR/root"
state = "$STATE_DIR/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE_DIR/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "minilet.test/pause:latest"
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$STATE_DIR/cni"
    max_conf_num = 1
EOF

	say "starting containerd (state in $STATE_DIR, log $LOG)"
	# setsid + nohup: containerd outlives this script and its session.
	# env --default-signal: signals ignored by whoever started us (signal 32
	# has been seen ignored on these machines) are reset for containerd,
	# its shims and runc.
	envcmd=(env)
	if env --default-signal true 2>/dev/null; then
		envcmd=(env --default-signal)
	fi
	setsid nohup "${envcmd[@]}" containerd --config "$STATE_DIR/config.toml" >>"$LOG" 2>&1 </dev/null &
	echo $! >"$PIDFILE"

	for _ in $(seq 1 600); do # up to 60 s
		answers && break
		if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
			die "containerd exited during start"
		fi
		sleep 0.1
	done
	answers || die "containerd did not answer on $SOCK within 60 s"
fi

for _ in $(seq 1 300); do # up to 30 s
	cri_ok && break
	sleep 0.1
done
cri_ok || die "containerd answers but its CRI plugin is not ok: $("${CTR[@]}" plugins ls 2>&1 | grep -i cri || true)"

# --- 3. images -------------------------------------------------------------
have_image() {
	# Not `ctr | grep -q`: grep exiting early would SIGPIPE ctr and, with
	# pipefail, fail the check at random.
	local list
	list=$("${CTR[@]}" -n k8s.io images ls -q 2>/dev/null) || return 1
	grep -qx -- "$1" <<<"$list"
}

# docker_archive NAME ROOTFS CONFIG_JSON OUT: a docker-save archive of one
# layer holding ROOTFS, with the image config CONFIG_JSON ("config" part).
docker_archive() {
	local name=$1 rootfs=$2 cfg=$3 out=$4 work
	work=$(mktemp -d)
	mkdir -p "$work/layer"
	tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$work/layer/layer.tar" .
	local diff
	diff=$(sha256sum "$work/layer/layer.tar" | cut -d' ' -f1)
	cat >"$work/config.json" <<EOF
{"architecture":"$(go_arch)","os":"linux","created":"2024-01-01T00:00:00Z","config":$cfg,"rootfs":{"type":"layers","diff_ids":["sha256:$diff"]},"history":[{"created":"2024-01-01T00:00:00Z","created_by":"minilet scripts/containerd-up.sh"}]}
EOF
	local cfgsha
	cfgsha=$(sha256sum "$work/config.json" | cut -d' ' -f1)
	mv "$work/config.json" "$work/$cfgsha.json"
	echo "[{\"Config\":\"$cfgsha.json\",\"RepoTags\":[\"$name\"],\"Layers\":[\"layer/layer.tar\"]}]" >"$work/manifest.json"
	tar -C "$work" -cf "$out" manifest.json "$cfgsha.json" layer/layer.tar
	rm -rf "$work"
}

go_arch() {
	case "$(uname -m)" in
	x86_64) echo amd64 ;;
	aarch64) echo arm64 ;;
	*) uname -m ;;
	esac
}

import_image() {
	local name=$1 archive=$2
	local ok=0
	for attempt in 1 2 3; do
		if "${CTR[@]}" -n k8s.io images import --snapshotter overlayfs "$archive" >&2; then
			ok=1
			break
		fi
		say "import of $name failed (attempt $attempt); retrying"
		sleep 1
	done
	[ $ok = 1 ] || die "could not import $name"
	have_image "$name" || die "$name is not listed after import"
}

# busybox_rootfs DIR: Debian's static busybox with a link for every applet.
busybox_rootfs() {
	local dir=$1 target
	mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,proc,sys,dev,var/www,home}
	chmod 1777 "$dir/tmp"
	# One fork instead of one per applet: busybox links itself, pointing at
	# its own resolved path, which we then fill with the binary.
	/bin/busybox --install -s "$dir/bin"
	target=$(readlink "$dir/bin/sh")
	[ -n "$target" ] || die "busybox --install made no links"
	rm -f "$dir/bin/busybox" "$dir$target"
	mkdir -p "$dir$(dirname "$target")"
	cp /bin/busybox "$dir$target"
	[ "$target" = /bin/busybox ] || ln -s "$target" "$dir/bin/busybox"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
	echo "minilet" >"$dir/var/www/index.html"
}

BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
BB_CFG='{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["/bin/sh"],"WorkingDir":"/"}'

if ! have_image minilet.test/pause:latest; then
	say "building minilet.test/pause:latest"
	command -v go >/dev/null 2>&1 || die "go is needed to build the pause image"
	mkdir -p "$BUILD/pause-src" "$BUILD/pause/etc"
	cat >"$BUILD/pause-src/main.go" <<'EOF'
// pause holds a pod's namespaces: it waits for SIGTERM or SIGINT and reaps
// the children it inherits.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range ch {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
EOF
	(cd "$BUILD/pause-src" && CGO_ENABLED=0 GOFLAGS= GO111MODULE=off go build -trimpath -ldflags '-s -w' -o "$BUILD/pause/pause" main.go) >&2 ||
		die "go build of the pause program failed"
	printf 'root:x:0:0:root:/:/pause\n' >"$BUILD/pause/etc/passwd"
	docker_archive minilet.test/pause:latest "$BUILD/pause" '{"Entrypoint":["/pause"],"WorkingDir":"/"}' "$BUILD/pause.tar"
	import_image minilet.test/pause:latest "$BUILD/pause.tar"
fi

if ! have_image minilet.test/busybox:latest; then
	say "building minilet.test/busybox:latest"
	busybox_rootfs "$BUILD/busybox"
	docker_archive minilet.test/busybox:latest "$BUILD/busybox" "$BB_CFG" "$BUILD/busybox.tar"
	import_image minilet.test/busybox:latest "$BUILD/busybox.tar"
fi

if ! have_image minilet.test/python:latest; then
	say "building minilet.test/python:latest"
	root="$BUILD/python"
	busybox_rootfs "$root"
	py=$(readlink -f /usr/bin/python3)
	ver=$(basename "$py")
	# The interpreter, Debian's minimal standard library, and the shared
	# libraries the interpreter links.
	{
		echo "$py"
		dpkg -L "$ver-minimal" "lib$ver-minimal" 2>/dev/null | grep "^/usr/lib/$ver/" || true
		ldd "$py" | awk '/=>/ { print $3 } /^\t\/.*ld-linux/ { print $1 }'
	} | while read -r f; do
		if [ -f "$f" ]; then echo "$f"; fi
	done >"$BUILD/pyfiles"
	tar --dereference -cf - -T "$BUILD/pyfiles" 2>/dev/null | tar -xf - -C "$root" ||
		die "copying python3 into the image failed"
	ldso=$(ldd "$py" | awk '/ld-linux/ && !seen++ { print ($3 != "" ? $3 : $1) }')
	[ -n "$ldso" ] && [ -e "$ldso" ] && mkdir -p "$root/$(dirname "$ldso")" && cp -L "$ldso" "$root/$ldso"
	# /lib64 and /lib are links to /usr/... on Debian; keep both paths valid.
	for d in lib lib64; do
		if [ -L "/$d" ] && [ -d "$root/usr/$d" ] && [ ! -e "$root/$d" ]; then
			ln -s "usr/$d" "$root/$d"
		fi
	done
	ln -sf "$py" "$root/usr/bin/python3"
	docker_archive minilet.test/python:latest "$root" "$BB_CFG" "$BUILD/python.tar"
	import_image minilet.test/python:latest "$BUILD/python.tar"
fi

say "containerd is ready"
echo "unix://$SOCK"
