#!/usr/bin/env bash
# vm-image.sh — build the cgroup v2 test bed's virtual machine (test/vm) and
# print the directory holding it as the last line of output. The directory
# has:
#
#   vmlinuz     Debian's cloud kernel (linux-image-*-cloud-amd64)
#   initrd.img  a busybox /init that loads virtio_pci and virtio_blk (modules
#               in that kernel), mounts /dev/vda and switch_root's to systemd
#   rootfs.img  an ext4 image of Debian 12 (bookworm, systemd 252) with the
#               kernel's modules and vm-job.service, which runs the job of a
#               second disk (/dev/vdb) and powers the machine off
#   cmdline     the kernel command line to boot it with (cgroup v2 only)
#
# Guests boot it under qemu-system-x86_64 with the root image read-only to
# them (snapshot=on), so runs never change the cache.
#
# Everything comes from the Debian archive apt already uses (read from
# /etc/apt/sources.list*, never a hard-coded host): mmdebstrap builds the root
# filesystem, `apt-get download` + `dpkg -x` fetch the kernel (nothing is
# installed on the host), mkfs.ext4 -d makes the image (no loop mounts). It
# takes one to two minutes and is cached in
# ${MINILET_VM_CACHE:-~/.cache/minilet-vm}/<key>, the key a hash of what
# builds it (suite, package lists, build functions), so editing those builds a
# new image and a second run reuses the old one in no time; concurrent callers
# wait on a lock.
#
# Installs, when missing, from the distribution's packages: qemu-system-x86
# (the emulator), mmdebstrap, busybox-static (the initrd's shell) and
# e2fsprogs (mkfs.ext4, debugfs).
set -euo pipefail

SUITE=bookworm
# What the guest needs to boot systemd and be a node: udev and kmod for
# systemd's own units and modules, dbus for systemctl, iproute2 and procps to
# look around.
PACKAGES=systemd-sysv,udev,dbus,kmod,iproute2,procps
# The kernel: Debian's cloud flavour, small, with virtio as modules and no 9p.
KERNEL=linux-image-cloud-amd64
# Modules the initrd loads (with their dependencies, from modules.dep) to find
# the root disk; ext4 is built in.
INITRD_MODULES="virtio_pci virtio_blk"
# Size of the root image (sparse: it costs what the files take); what guests
# write goes to qemu's snapshot file, not here.
ROOTFS_SIZE=2G

CACHE=${MINILET_VM_CACHE:-${HOME:-/root}/.cache/minilet-vm}
say() { echo "vm-image: $*" >&2; }

install_tools() {
	local missing=()
	command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
	command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
	[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx switch_root || missing+=(busybox-static)
	{ command -v mkfs.ext4 && command -v debugfs; } >/dev/null 2>&1 || missing+=(e2fsprogs)
	[ ${#missing[@]} = 0 ] && return
	say "installing ${missing[*]} (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# shellcheck source=lib/apt-mirror.sh
source "$(dirname "$0")/lib/apt-mirror.sh"

# fetch_kernel downloads the versioned kernel package the metapackage points
# at and extracts it into $1 (boot/vmlinuz-*, lib/modules/*); prints the
# kernel's version.
fetch_kernel() {
	local out=$1 pkg
	pkg=$(apt-cache depends "$KERNEL" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	if [ -z "$pkg" ]; then
		say "apt knows no $KERNEL; apt-get update"
		apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
		pkg=$(apt-cache depends "$KERNEL" | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	fi
	[ -n "$pkg" ] || { say "cannot resolve $KERNEL to a kernel package"; exit 1; }
	mkdir -p "$out/deb"
	(cd "$out/deb" && apt-get -q -o APT::Sandbox::User=root download "$pkg" >&2)
	dpkg -x "$out"/deb/"$pkg"_*.deb "$out/x"
	echo "${pkg#linux-image-}"
}

# guest_files writes what the test bed adds to the root filesystem $1: the
# job runner and its unit, the host name.
guest_files() {
	local root=$1
	echo vm >"$root/etc/hostname"
	mkdir -p "$root/usr/local/sbin" "$root/job"
	cat >"$root/usr/local/sbin/vm-job" <<'EOF'
#!/bin/sh
# vm-job: run the job on the second disk (/dev/vdb, made by test/vm): copy
# /job/files/ over /, run /job/run.sh with bash in /job (stdout, stderr and
# exit code to /job/out/; $OUT=/job/out/files is copied back to the host)
# once the boot is done, then power off. Its own messages go to the console.
mount /dev/vdb /job || { echo "vm-job: cannot mount the job disk /dev/vdb"; systemctl poweroff --no-block; exit 1; }
mkdir -p /job/out/files
if [ -d /job/files ]; then cp -a /job/files/. / || echo "vm-job: copying the job's files in failed"; fi
# The boot's last jobs may still run next to this one: wait for them.
state=$(systemctl is-system-running --wait)
echo "vm-job: the system is $state; running /job/run.sh"
cd /job && OUT=/job/out/files /bin/bash /job/run.sh </dev/null >/job/out/stdout 2>/job/out/stderr
code=$?
echo "$code" >/job/out/exit-code
cd / && sync && umount /job
echo "vm-job: /job/run.sh exited with $code; powering off"
systemctl poweroff --no-block
EOF
	chmod 755 "$root/usr/local/sbin/vm-job"
	cat >"$root/etc/systemd/system/vm-job.service" <<'EOF'
[Unit]
Description=test/vm job (/dev/vdb)
After=multi-user.target

[Service]
# simple: the boot is done (systemctl is-system-running says running) while
# the job runs.
Type=simple
ExecStart=/usr/local/sbin/vm-job
Environment=HOME=/root
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
	mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
	ln -sf ../vm-job.service "$root/etc/systemd/system/multi-user.target.wants/vm-job.service"
	# No login prompt on the console: nobody types there.
	ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
}

# initrd_init is the initrd's /init.
initrd_init() {
	cat <<'EOF'
#!/bin/sh
# Load the root disk's modules, mount it and hand over to systemd.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/modules/$m" || echo "vm-init: insmod $m failed"; done </modules.list
i=0
while [ ! -b /dev/vda ]; do
	i=$((i + 1))
	if [ "$i" -gt 600 ]; then echo "vm-init: no /dev/vda after 60 s"; poweroff -f; fi
	sleep 0.1
done
mount -t ext4 -o rw /dev/vda /newroot || { echo "vm-init: cannot mount /dev/vda"; poweroff -f; }
umount /proc /sys /dev
exec switch_root /newroot /sbin/init
EOF
}

# module_deps prints module $2 (a path relative to the modules dir $1) after
# its dependencies, each once, from modules.dep.
module_deps() {
	local dir=$1 m=$2 d
	case " $seen " in *" $m "*) return ;; esac
	for d in $(awk -v m="$m:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' "$dir/modules.dep"); do
		module_deps "$dir" "$d"
	done
	seen="$seen $m"
	echo "$m"
}

make_initrd() {
	local moddir=$1 out=$2 work=$3 name path seen=""
	mkdir -p "$work"/{bin,proc,sys,dev,newroot,modules}
	cp /bin/busybox "$work/bin/busybox"
	for name in sh mount umount insmod sleep poweroff switch_root; do ln -s busybox "$work/bin/$name"; done
	initrd_init >"$work/init"
	chmod 755 "$work/init"
	: >"$work/modules.list"
	for name in $INITRD_MODULES; do
		path=$(awk -v n="/$name.ko:" 'index($1, n) && substr($1, length($1) - length(n) + 1) == n { sub(/:$/, "", $1); print $1; exit }' "$moddir/modules.dep")
		[ -n "$path" ] || { say "no module $name in $moddir/modules.dep"; exit 1; }
		module_deps "$moddir" "$path" >>"$work/modules.list.all"
	done
	# each once, in load order
	awk '!seen[$0]++' "$work/modules.list.all" | while read -r path; do
		cp "$moddir/$path" "$work/modules/"
		basename "$path" >>"$work/modules.list"
	done
	rm "$work/modules.list.all"
	(cd "$work" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$out"
}

build() {
	local dir=$1 uri ver tmp=$1.tmp
	uri=$(mirror | head -n 1)
	if [ -z "$uri" ]; then
		say "no apt source for $SUITE in /etc/apt/sources.list*; cannot build the VM image"
		exit 1
	fi
	say "building the VM image: mmdebstrap --variant=minbase --include=$PACKAGES $SUITE from $uri, the kernel $KERNEL, an initrd and a $ROOTFS_SIZE ext4 image (one to two minutes, cached afterwards in $dir)"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	local start=$SECONDS
	nice -n 10 mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
		"$SUITE" "$tmp/rootfs" "deb $uri $SUITE main" >&2
	say "root filesystem in $((SECONDS - start)) s; fetching the kernel"
	ver=$(fetch_kernel "$tmp/kernel")
	cp "$tmp/kernel/x/boot/vmlinuz-$ver" "$tmp/vmlinuz"
	# The modules go into the guest too (modprobe overlay, veth, bridge...);
	# depmod is the guest's own (kmod), run on its tree.
	mkdir -p "$tmp/rootfs/usr/lib/modules"
	cp -a "$tmp/kernel/x/lib/modules/$ver" "$tmp/rootfs/usr/lib/modules/"
	chroot "$tmp/rootfs" /sbin/depmod "$ver"
	make_initrd "$tmp/rootfs/usr/lib/modules/$ver" "$tmp/initrd.img" "$tmp/initrd"
	guest_files "$tmp/rootfs"
	echo "console=ttyS0 root=/dev/vda rw systemd.unified_cgroup_hierarchy=1 panic=-1 loglevel=4" >"$tmp/cmdline"
	echo "$ver" >"$tmp/kernel-version"
	say "kernel $ver and initrd in $((SECONDS - start)) s; making the ext4 image"
	nice -n 10 mkfs.ext4 -q -F -L root -d "$tmp/rootfs" "$tmp/rootfs.img" "$ROOTFS_SIZE" >&2
	rm -rf "$tmp/rootfs" "$tmp/kernel" "$tmp/initrd"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	say "built in $((SECONDS - start)) s: $dir"
}

install_tools
# The key is what builds the image (the settings above and the build
# functions), so that editing the rest of this script costs no rebuild.
key=$({
	echo "$SUITE $PACKAGES $KERNEL $INITRD_MODULES $ROOTFS_SIZE"
	declare -f build fetch_kernel guest_files initrd_init module_deps make_initrd
} | sha256sum | cut -c1-16)
dir="$CACHE/$key"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$dir/rootfs.img" ]; then
	say "using the cached VM image in $dir"
else
	build "$dir"
fi
echo "$dir"
