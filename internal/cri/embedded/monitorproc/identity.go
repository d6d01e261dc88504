package monitorproc

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A PID alone does not name a process: once the process is gone the kernel
// hands the number to another one, and a machine that rebooted reuses them
// all. A ProcID names a process for good: its PID, its start time (field
// 22 of /proc/PID/stat, in clock ticks since boot) and the boot it ran in.

// ProcID identifies one process across PID reuse and reboots.
type ProcID struct {
	Pid    int    `json:"pid"`
	Ticks  uint64 `json:"ticks,omitempty"`  // start time; 0 when unknown (records of older versions)
	BootID string `json:"bootId,omitempty"` // the kernel's boot ID; empty when unknown
}

// Identify returns the ProcID of a live process (zero Pid when it is gone).
func Identify(pid int) ProcID {
	ticks, alive := ProcStartTicks(pid)
	if !alive {
		return ProcID{}
	}
	return ProcID{Pid: pid, Ticks: ticks, BootID: BootID()}
}

// Alive reports whether the process p names still runs (is not a zombie):
// the same PID, started at the same time, in this boot.
func (p ProcID) Alive() bool {
	if p.Pid <= 0 || (p.BootID != "" && p.BootID != BootID()) {
		return false
	}
	ticks, alive := ProcStartTicks(p.Pid)
	return alive && (p.Ticks == 0 || ticks == p.Ticks)
}

// Signal sends sig to the process p names, and only to it: through a pidfd
// opened before the identity is checked, so that the PID cannot change
// hands between the check and the signal. It reports false (and no error)
// when the process is gone.
func (p ProcID) Signal(sig syscall.Signal) (bool, error) {
	if p.Pid <= 0 || p.Pid == 1 {
		return false, nil
	}
	fd, err := unix.PidfdOpen(p.Pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return false, nil
	case errors.Is(err, unix.ENOSYS):
		// Kernels before 5.3: check, then signal (a narrow window).
		if !p.Alive() {
			return false, nil
		}
		return true, ignoreGone(unix.Kill(p.Pid, sig))
	case err != nil:
		return false, err
	}
	defer func() { _ = unix.Close(fd) }()
	if !p.Alive() {
		return false, nil
	}
	return true, ignoreGone(unix.PidfdSendSignal(fd, sig, nil, 0))
}

// SignalGroup sends sig to the process group p leads, once p is verified
// to be the process it names; a leader that left its group is signalled
// alone. It reports false when the process is gone.
func (p ProcID) SignalGroup(sig syscall.Signal) (bool, error) {
	if p.Pid <= 1 {
		return false, nil
	}
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err == nil {
		defer func() { _ = unix.Close(fd) }()
	}
	if !p.Alive() {
		return false, nil
	}
	if pgid, err := unix.Getpgid(p.Pid); err == nil && pgid == p.Pid {
		return true, ignoreGone(unix.Kill(-p.Pid, sig))
	}
	return p.Signal(sig)
}

func ignoreGone(err error) error {
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

var bootID = sync.OnceValue(func() string {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
})

// BootID is the kernel's boot ID (empty when the kernel does not say).
func BootID() string { return bootID() }

// ProcParent is the parent PID of pid (0 when it is gone).
func ProcParent(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
