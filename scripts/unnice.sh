#!/bin/sh
# unnice.sh CMD...: run CMD at 5 nice levels higher priority than this
# script's, where allowed (root), else as is. scripts/test.sh compiles the
# tests at nice 5 while the cold cluster build (the longest job of a fresh
# run) goes on at normal priority, and runs the test binaries through this
# (go test -exec) at the usual priority, which their deadlines are set for.
if [ "$(nice -n -5 nice 2>/dev/null)" -lt "$(nice)" ] 2>/dev/null; then
	exec nice -n -5 "$@"
fi
exec "$@"
