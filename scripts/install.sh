#!/usr/bin/env bash
# install.sh — install minilet as a systemd service: the binaries built by
# `make build` into $PREFIX/bin (default /usr/local/bin), the unit into
# /etc/systemd/system, a configuration into /etc/minilet (an existing one
# is kept) with an empty manifests folder, all under $DESTDIR if set (for
# packaging). On a host running systemd (and no DESTDIR) it then reloads
# systemd and enables and (re)starts the service: an upgrade in place
# replaces the binaries and restarts the agent, which adopts every pod.
set -euo pipefail
cd "$(dirname "$0")/.."

DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
say() { echo "install: $*" >&2; }

for b in minilet minilet-monitor minilet-exec; do
	[ -x "bin/$b" ] || { say "bin/$b is missing: run make build first"; exit 1; }
done
say "binaries into $DESTDIR$PREFIX/bin"
for b in minilet minilet-monitor minilet-exec; do
	# Replace, never write into a running binary.
	install -D -m 0755 "bin/$b" "$DESTDIR$PREFIX/bin/.$b.new"
	mv -f "$DESTDIR$PREFIX/bin/.$b.new" "$DESTDIR$PREFIX/bin/$b"
done
unit=$DESTDIR/etc/systemd/system/minilet.service
say "unit into $unit"
install -D -m 0644 deploy/systemd/minilet.service "$unit"
if [ "$PREFIX" != /usr/local ]; then
	sed -i "s|/usr/local/bin/minilet|$PREFIX/bin/minilet|" "$unit"
fi
install -d -m 0755 "$DESTDIR/etc/minilet/manifests"
if [ -e "$DESTDIR/etc/minilet/config.yaml" ]; then
	say "keeping the existing $DESTDIR/etc/minilet/config.yaml"
else
	say "configuration into $DESTDIR/etc/minilet/config.yaml"
	install -m 0644 deploy/etc/config.yaml "$DESTDIR/etc/minilet/config.yaml"
fi
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
	say "systemctl daemon-reload; enable and (re)start minilet"
	systemctl daemon-reload
	systemctl enable minilet.service
	systemctl restart minilet.service
	systemctl --no-pager --lines=0 status minilet.service || true
else
	say "done; on the target: systemctl daemon-reload && systemctl enable --now minilet"
fi
