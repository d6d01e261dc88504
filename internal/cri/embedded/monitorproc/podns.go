package monitorproc

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// nsKinds are the pod namespace kinds a container joins, in the order it
// joins them, with their setns flags.
var nsKinds = []struct {
	kind string
	flag int
}{{"net", unix.CLONE_NEWNET}, {"uts", unix.CLONE_NEWUTS}, {"ipc", unix.CLONE_NEWIPC}}

// joinPodNamespaces moves the calling thread (locked; it execs the
// container next) into the held pod namespaces join (kind → path). The
// pod's PID namespace ("pid") is not among them: the monitor forks the
// init into it.
func joinPodNamespaces(join map[string]string) error {
	for _, ns := range nsKinds {
		p := join[ns.kind]
		if p == "" {
			continue
		}
		if err := setnsPath(p, ns.flag); err != nil {
			return fmt.Errorf("enter the pod's %s namespace: %w", ns.kind, err)
		}
	}
	return nil
}

func setnsPath(p string, flag int) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return unix.Setns(int(f.Fd()), flag)
}

// joinNamespacesOf moves the calling thread into the network, UTS and IPC
// namespaces of process pid where they differ from its own (an exec into
// a running container).
func joinNamespacesOf(pid string) error {
	for _, ns := range nsKinds {
		theirs := "/proc/" + pid + "/ns/" + ns.kind
		if sameNamespace(theirs, "/proc/thread-self/ns/"+ns.kind) {
			continue
		}
		if err := setnsPath(theirs, ns.flag); err != nil {
			return fmt.Errorf("enter the container's %s namespace: %w", ns.kind, err)
		}
	}
	return nil
}

func sameNamespace(a, b string) bool {
	x, err1 := os.Readlink(a)
	y, err2 := os.Readlink(b)
	return err1 == nil && err2 == nil && x == y
}

// dropHeldNamespaces detaches, in the container's own mount namespace,
// the copies of the mounts under dir that hold pods' namespaces: left
// there, they would keep those namespaces alive after their pods are gone.
func dropHeldNamespaces(dir string) error {
	if dir == "" {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	prefix := filepath.Clean(dir) + "/"
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			return fmt.Errorf("detach %s from the container's mounts: %w", p, err)
		}
	}
	return nil
}
