// Package vm is the cgroup v2 sibling of test/hosts: a test bed that boots a
// virtual machine with its own kernel, systemd as PID 1 and only the unified
// cgroup hierarchy (cpuset, cpu, io, memory, hugetlb, pids), whatever the
// host mounts. Tests run a job in it: files copied in, a bash script run as
// root, its output and files copied back out.
//
//	res := vm.Run(t, vm.Job{
//		Files:  map[string]string{"../../bin/minilet": "/usr/local/bin/minilet"},
//		Script: "minilet version; cp /etc/os-release $OUT/",
//	})
//	// res.ExitCode, res.Stdout, res.Stderr, res.Files["os-release"], res.Console
//
// The machine is qemu-system-x86_64 with Debian's cloud kernel and a
// Debian 12 root filesystem that scripts/vm-image.sh builds once (about a
// minute) and caches by content in ~/.cache/minilet-vm; every Run boots it
// read-only (qemu's snapshot=on: the guest's writes go to a temporary file
// and vanish), with the job on a second disk, an ext4 image made with
// mkfs.ext4 -d and read back with debugfs. The guest's vm-job.service mounts
// it, runs the script and powers off; qemu exits with it. The guest has no
// network.
//
// It runs under QEMU's software emulation (TCG) by default, because the
// KVM of the machines it was written on boots only PVM guest kernels:
// 20–30 s for a boot, a short job and the power-off, code 5–10 times slower
// than on the host. MINILET_VM_ACCEL=kvm uses a real KVM where there is one.
//
// Everything needs root; Run skips the test without it (CI runs as root),
// and when qemu cannot run here.
package vm
