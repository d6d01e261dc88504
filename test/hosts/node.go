package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// NodeConfig says what node to start.
type NodeConfig struct {
	// Name is the node's host name, unique on its network: lower-case
	// letters, digits and dashes. Required.
	Name string
	// Network is the network the node joins. Default: a network of its
	// own, removed with the node.
	Network *Network
	// BootTimeout bounds a boot, from launching nspawn until systemd says
	// the system is running (or degraded). Default 2 minutes: a boot takes
	// about a second, but CI machines are small and busy.
	BootTimeout time.Duration
	// StopTimeout bounds a power-off before the node's processes are
	// killed. Default 1 minute.
	StopTimeout time.Duration
}

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

func (c *NodeConfig) validate() error {
	if !validName.MatchString(c.Name) {
		return fmt.Errorf("NodeConfig.Name %q: want 1-32 lower-case letters, digits and dashes", c.Name)
	}
	if c.BootTimeout < 0 || c.StopTimeout < 0 {
		return errors.New("NodeConfig.BootTimeout and StopTimeout must not be negative")
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 2 * time.Minute
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = time.Minute
	}
	return nil
}

// rebootStatus is nspawn's exit status when the container asked to reboot.
const rebootStatus = 133

// Node is a node container: systemd as PID 1 under systemd-nspawn, on its
// own overlay root filesystem, network namespace and cgroups. Its state
// survives reboots and restarts (the overlay's upper layer is kept) until
// Close.
type Node struct {
	cfg     NodeConfig
	net     *Network
	ownNet  bool   // the network was made for this node alone
	id      string // unique on the host: <network id>-<name>
	dir     string // holds upper/, work/, rootfs/ and console.log
	rootfs  string // the overlay's mount point, the container's /
	netns   string
	ip      string
	cgroups *nodeCgroups
	logf    func(string, ...any)

	mu       sync.Mutex
	nspawn   *exec.Cmd     // the running nspawn, nil when the node is off
	leader   int           // the container's PID 1 as the host sees it, 0 until known
	boots    int           // boots started, reboots included
	stopping bool          // a power-off was asked for: nspawn's exit is final
	exited   chan struct{} // closed when the current nspawn ends for good
	exitErr  error         // why it ended
	closed   bool
}

// StartNode makes a node, boots it and waits until systemd reports the
// system running (or degraded: some units cannot start in a container).
// t.Cleanup powers it off and removes everything it made on the host. It
// skips the test when not root and fails it when the node does not boot.
func StartNode(t testing.TB, cfg NodeConfig) *Node {
	t.Helper()
	requireRoot(t)
	start := time.Now()
	n, err := newNode(t, cfg)
	if err != nil {
		t.Fatalf("node %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s: console, last lines:\n%s", n.cfg.Name, n.consoleTail(4096))
		}
		if err := n.Close(); err != nil {
			t.Errorf("node %s: %v", n.cfg.Name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.BootTimeout)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("node %s: %v; console, last lines:\n%s", cfg.Name, err, n.consoleTail(4096))
	}
	t.Logf("node %s: started in %v (root filesystem, network, cgroups and boot), address %s", cfg.Name, time.Since(start).Round(10*time.Millisecond), n.ip)
	return n
}

// newNode makes everything a node needs on the host, without booting it.
func newNode(t testing.TB, cfg NodeConfig) (n *Node, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lower, err := Image(t)
	if err != nil {
		return nil, err
	}
	n = &Node{cfg: cfg, net: cfg.Network, logf: t.Logf}
	if n.net == nil {
		if n.net, err = newNetwork(t.Logf); err != nil {
			return nil, err
		}
		n.ownNet = true
	}
	n.id = n.net.id + "-" + cfg.Name
	n.netns = "mh-" + n.id
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
		}
	}()
	if n.dir, err = os.MkdirTemp("", "minilet-hosts-"+n.id+"-"); err != nil {
		return n, fmt.Errorf("node directory: %w", err)
	}
	if err = n.mountRootfs(lower); err != nil {
		return n, err
	}
	if err = n.writeIdentity(); err != nil {
		return n, err
	}
	if _, err = n.net.attach(n, n.netns); err != nil {
		return n, err
	}
	n.cgroups, err = newNodeCgroups(n.id)
	return n, err
}

// mountRootfs gives the node a copy-on-write root filesystem: an overlay
// whose lower layer is the shared, cached image, so a node costs no copy
// and its writes stay in its own upper layer (kept across reboots).
func (n *Node) mountRootfs(lower string) error {
	upper, work := filepath.Join(n.dir, "upper"), filepath.Join(n.dir, "work")
	n.rootfs = filepath.Join(n.dir, "rootfs")
	for _, d := range []string{upper, work, n.rootfs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("node root filesystem: %w", err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := syscall.Mount("overlay", n.rootfs, "overlay", 0, opts); err != nil {
		n.rootfs = "" // nothing to unmount
		return fmt.Errorf("node root filesystem: mount overlay %s: %w", opts, err)
	}
	return nil
}

// writeIdentity gives the node what makes it a host of its own: its name,
// a machine ID (systemd, journald and dbus key things on it), and the
// PID 1 wrapper.
func (n *Node) writeIdentity() error {
	id, err := randomHex(16)
	if err != nil {
		return err
	}
	files := []struct {
		path string
		data string
		mode os.FileMode
	}{
		{"etc/hostname", n.cfg.Name + "\n", 0o644},
		{"etc/machine-id", id + "\n", 0o444},
		{nodeInitPath[1:], nodeInit, 0o755},
	}
	for _, f := range files {
		p := filepath.Join(n.rootfs, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("node identity: %w", err)
		}
		if err := writeFileAtomic(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("node identity: %w", err)
		}
	}
	return nil
}

// nodeInit is the container's PID 1 until it execs systemd. nspawn mounts
// the cgroup v1 controller hierarchies read-only (only name=systemd is
// writable), and systemd then silently applies no resource limits: a
// MemoryMax= unit runs unlimited. Inside the container's own cgroup
// namespace (rooted at the node's cgroup) the bind mounts can be made
// writable again, which is what a node needs to be a node. It never
// touches the host's cgroups.
const (
	nodeInitPath = "/usr/local/sbin/node-init"
	nodeInit     = `#!/bin/sh
# node-init: PID 1 of a minilet-hosts node container (test/hosts).
# nspawn mounts the cgroup v1 controllers read-only; systemd would then
# apply no limits and say nothing. Make them writable, then boot systemd.
for d in /sys/fs/cgroup/*/; do
	mount -o remount,bind,rw "$d" || echo "node-init: cannot make $d writable" >&2
done
exec /lib/systemd/systemd "$@"
`
)

// Name is the node's host name.
func (n *Node) Name() string { return n.cfg.Name }

// IP is the node's address on its network.
func (n *Node) IP() string { return n.ip }

// Rootfs is the node's root filesystem as the host sees it (the overlay's
// mount point). Mounts made inside the node are not visible there.
func (n *Node) Rootfs() string { return n.rootfs }

// Dir is the host directory holding the node's overlay layers and console
// log; Close removes it.
func (n *Node) Dir() string { return n.dir }

// Netns is the name (`ip netns`) of the node's network namespace.
func (n *Node) Netns() string { return n.netns }

// CgroupName is the node's cgroup below minilet-hosts/ in every hierarchy.
func (n *Node) CgroupName() string { return n.id }

// Boots counts the boots so far, reboots included.
func (n *Node) Boots() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.boots
}
