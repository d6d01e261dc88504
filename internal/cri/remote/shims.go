package remote

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A containerd shim is a process "containerd-shim-<runtime>-v2
// -namespace NS -id ID -address CONTAINERD_SOCKET" (its short-lived
// "... start" and "... delete" forms aside). It serves one sandbox (and
// the sandbox's containers) of the containerd at its -address.

// shimProc is one live shim daemon, as /proc shows it.
type shimProc struct {
	PID       int
	ID        string
	Namespace string
	Address   string
	// StartTicks is its start time in clock ticks after boot (field 22
	// of /proc/PID/stat): with the PID, what identifies the process.
	StartTicks uint64
	// Age is how long it has run.
	Age time.Duration
	// Children counts its live child processes (a sandbox's shim has at
	// least the sandbox's pause process).
	Children int
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// procStat is what minilet reads of /proc/PID/stat.
type procStat struct {
	State      byte
	PPID       int
	StartTicks uint64
}

// readStat parses /proc/PID/stat. The command name (field 2) is in
// parentheses and may hold spaces and parentheses: fields are counted
// after its last ")".
func readStat(proc string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return procStat{State: f[0][0], PPID: ppid, StartTicks: start}, nil
}

// uptime is how long the machine has run (/proc/uptime).
func uptime(proc string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(proc, "uptime"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/uptime: empty")
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/uptime: %w", err)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// parseShim reads a shim daemon's flags from its command line; ok is
// false for any other process, and for a shim's "start" or "delete" run.
func parseShim(cmdline []byte) (id, namespace, address string, ok bool) {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim-") {
		return "", "", "", false
	}
	for i := 1; i < len(args); i++ {
		flag := strings.TrimLeft(args[i], "-")
		if flag == args[i] { // not a flag: a subcommand (start, delete)
			return "", "", "", false
		}
		name, value, hasValue := strings.Cut(flag, "=")
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
			i++
		}
		switch name {
		case "id":
			id = value
		case "namespace":
			namespace = value
		case "address":
			address = value
		}
	}
	return id, namespace, address, id != "" && namespace != "" && address != ""
}

// findShims lists the live shim daemons under proc (normally /proc) of
// the containerd at address, in namespace.
func findShims(proc, address, namespace string) ([]shimProc, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	up, err := uptime(proc)
	if err != nil {
		return nil, err
	}
	children := map[int]int{}
	var shims []shimProc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(proc, pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue // gone meanwhile, or dead
		}
		children[st.PPID]++
		cmd, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		id, ns, addr, ok := parseShim(cmd)
		if !ok || ns != namespace || filepath.Clean(addr) != filepath.Clean(address) {
			continue
		}
		started := time.Duration(st.StartTicks) * time.Second / clockTicks
		shims = append(shims, shimProc{PID: pid, ID: id, Namespace: ns, Address: addr,
			StartTicks: st.StartTicks, Age: max(up-started, 0)})
	}
	for i := range shims {
		shims[i].Children = children[shims[i].PID]
	}
	return shims, nil
}
