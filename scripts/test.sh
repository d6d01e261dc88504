#!/usr/bin/env bash
# test.sh STEP... — what `make test` (vet lint unit) and `make unit` (unit)
# run. Every step runs in full; they are arranged so that on 2 cores the CPU
# stays busy while something waits on the network, apt or a test's
# processes, instead of the steps queueing one after another:
#
#   - the cluster-mode binaries (hack/cluster, cached by content; see
#     internal/cluster/clusterbin), the longest single job of a fresh run,
#     start building at once in the background when unit will need them;
#   - containerd (scripts/containerd-up.sh: apt installs, images) is set up
#     in the background meanwhile;
#   - vet runs first in the foreground (it compiles the packages everything
#     else reuses);
#   - lint (installing golangci-lint, then running it) goes on in the
#     background at low priority while the tests run;
#   - unit runs `go test -race` on every package. The packages whose tests
#     use the cluster harness are a second `go test`, started once the
#     binaries are built: were they in the first, their test processes would
#     sit in its -p slots waiting for the build and hold up every other
#     package. With the vet step in the same run, go test's own vet pass
#     (a subset of go vet's checks, on the same files) is not repeated.
#
# Each step says how long it took. Environment: GO, MINILET_CLUSTER
# (default 1; 0 skips the cluster-mode tests), CONTAINERD_STATE.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
MINILET_CLUSTER=${MINILET_CLUSTER:-1}
CONTAINERD_STATE=${CONTAINERD_STATE:-/tmp/minilet-containerd}
GOTEST=("$GO" test -race -count=1 -timeout 40m)

steps=" $* "
want() { [[ $steps == *" $1 "* ]]; }
say() { echo "test.sh: $(date +%T) $*" >&2; }
since() { local s=$(($(date +%s) - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

work=$(mktemp -d /tmp/minilet-test.XXXXXX)
bg=()        # process groups of background jobs
cd_started=0 # containerd-up was started: stop containerd on exit
cleanup() {
	local rc=$?
	for p in "${bg[@]}"; do
		kill -TERM -- "-$p" 2>/dev/null || true
	done
	if [ $cd_started = 1 ]; then
		./scripts/containerd-down.sh "$CONTAINERD_STATE"
	fi
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: run CMD in the background in a process group of its
# own, its output to $work/NAME.log, its exit status to $work/NAME.rc.
start() {
	local name=$1
	shift
	setsid bash -c 's=$(date +%s); "$@" >"$0.log" 2>&1; rc=$?; echo $(($(date +%s) - s)) >"$0.secs"; echo $rc >"$0.rc"' "$work/$name" "$@" &
	bg+=($!)
}

# await NAME: wait for a background job, print its output and return its
# status.
await() {
	while [ ! -f "$work/$1.rc" ]; do
		sleep 1
	done
	cat "$work/$1.log" >&2
	say "$1 took $(cat "$work/$1.secs")s (status $(cat "$work/$1.rc"))"
	return "$(cat "$work/$1.rc")"
}

done_ok() { [ -f "$work/$1.rc" ] && [ "$(cat "$work/$1.rc")" = 0 ]; }

t0=$(date +%s)
if want unit; then
	if [ "$MINILET_CLUSTER" = 1 ]; then
		say "building the cluster-mode binaries in the background"
		start clusterbin "$GO" run ./internal/cluster/clusterbin/cmd/clusterbin
	fi
	say "setting up containerd in the background"
	start containerd ./scripts/containerd-up.sh "$CONTAINERD_STATE"
	cd_started=1
fi

if want vet; then
	t=$(date +%s)
	say "go vet ./..."
	"$GO" vet ./...
	say "vet took $(since "$t")"
	# go vet ./... just ran every check go test's vet pass would.
	GOTEST+=(-vet=off)
fi

if want lint; then
	say "lint in the background: installing golangci-lint, then golangci-lint run ./..."
	start lint nice -n 10 bash -c './scripts/install-tools.sh && echo "golangci-lint installed after $(($(date +%s) - $0))s" && "$(go env GOPATH)/bin/golangci-lint" run ./...' "$(date +%s)"
fi

rc=0
if want unit; then
	t=$(date +%s)
	if ! await containerd; then
		say "containerd could not be started (see above); the containerd tests cannot run"
		exit 1
	fi
	ep=$(tail -n 1 "$work/containerd.log")
	case "$ep" in
	unix://*) ;;
	*)
		say "containerd-up printed no endpoint; the containerd tests cannot run"
		exit 1
		;;
	esac
	say "containerd at $ep (waited $(since "$t"))"
	export MINILET_CLUSTER MINILET_CONTAINERD_ENDPOINT=$ep

	if [ "$MINILET_CLUSTER" != 1 ] || done_ok clusterbin; then
		# Nothing to wait for (binaries cached, or not wanted): one go test.
		if [ "$MINILET_CLUSTER" = 1 ]; then await clusterbin; fi
		say "go test -race ./..."
		"${GOTEST[@]}" ./... || rc=$?
	else
		# The packages whose tests use the cluster harness.
		cluster=$("$GO" list -f '{{.ImportPath}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}' ./... |
			awk '/ github.com\/minilet\/minilet\/internal\/cluster\/clustertest( |$)/ { print $1 }')
		others=$("$GO" list ./... | grep -vxF "$cluster")
		say "go test -race: $(echo "$others" | wc -l) packages now, $(echo "$cluster" | wc -l) cluster-mode packages once their binaries are built"
		# The second go test starts after the binaries are built, by when
		# the first has compiled the race-instrumented packages both need.
		(
			await clusterbin || say "the cluster-mode binaries failed to build; the tests retry and report why"
			say "go test -race the cluster-mode packages"
			# shellcheck disable=SC2086
			"${GOTEST[@]}" $cluster >"$work/cluster-test.log" 2>&1
		) &
		cluster_pid=$!
		# shellcheck disable=SC2086
		"${GOTEST[@]}" $others || rc=$?
		say "other packages' tests done after $(since "$t") (status $rc); waiting for the cluster-mode tests"
		crc=0
		wait $cluster_pid || crc=$?
		[ $crc = 0 ] || rc=$crc
	fi
	say "tests took $(since "$t") (status $rc)"
fi

if want lint; then
	lrc=0
	await lint || lrc=$?
	[ $lrc = 0 ] || rc=$lrc
fi
say "all steps took $(since "$t0") (status $rc)"
# The cluster-mode packages' results last, as go test's own closing lines.
if [ -f "$work/cluster-test.log" ]; then
	cat "$work/cluster-test.log"
fi
exit $rc
