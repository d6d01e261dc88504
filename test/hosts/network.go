package hosts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Subnet is every Network's address range. Networks never meet (each bridge
// lives in a network namespace of its own and nothing routes out), so they
// all use the same one; .1 is left for a gateway a later test may want.
const (
	subnetPrefix = "10.250.0."
	subnetBits   = 24
	firstHost    = 2
	lastHost     = 254
)

// Network is a private network for nodes: a bridge in a network namespace
// the harness makes, and a veth from it into each node's own namespace.
// There is no default route and no NAT, so nodes reach each other and
// nothing else.
type Network struct {
	id   string // random, keeps names apart across concurrent test processes
	ns   string // the bridge's network namespace
	logf func(string, ...any)

	mu     sync.Mutex
	nodes  map[string]*Node // by name
	next   int              // next host number to hand out
	closed bool
}

// NewNetwork makes a network and registers its removal with t.Cleanup
// (after the nodes on it, which are made later, are removed). It skips the
// test when not root.
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	requireRoot(t)
	n, err := newNetwork(t.Logf)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("network %s: %v", n.ns, err)
		}
	})
	return n
}

func newNetwork(logf func(string, ...any)) (*Network, error) {
	sweepStale(logf)
	id, err := randomHex(3)
	if err != nil {
		return nil, err
	}
	n := &Network{id: id, ns: "mh-" + id, logf: logf, nodes: map[string]*Node{}, next: firstHost}
	if err := recordOwner(id); err != nil {
		return nil, err
	}
	if err := ip("netns", "add", n.ns); err != nil {
		return nil, errors.Join(err, forgetOwner(id))
	}
	for _, args := range [][]string{
		{"-n", n.ns, "link", "set", "lo", "up"},
		{"-n", n.ns, "link", "add", "br0", "type", "bridge"},
		{"-n", n.ns, "link", "set", "br0", "up"},
	} {
		if err := ip(args...); err != nil {
			_ = ip("netns", "del", n.ns)
			return nil, errors.Join(err, forgetOwner(id))
		}
	}
	return n, nil
}

// Namespace is the name (`ip netns`) of the namespace holding the bridge.
func (n *Network) Namespace() string { return n.ns }

// Close removes the bridge's namespace, and with it the bridge and the
// host ends of the veths. Nodes still on the network are removed first.
// Idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	var nodes []*Node
	for _, nd := range n.nodes {
		nodes = append(nodes, nd)
	}
	n.mu.Unlock()
	var errs []error
	for _, nd := range nodes {
		errs = append(errs, nd.Close())
	}
	errs = append(errs, delNetns(n.ns), forgetOwner(n.id))
	return errors.Join(errs...)
}

// attach gives a node an address and a veth from the bridge into nodeNS,
// its own namespace (which it makes).
func (n *Network) attach(nd *Node, nodeNS string) (addr string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return "", errors.New("network " + n.ns + " is closed")
	}
	if _, dup := n.nodes[nd.cfg.Name]; dup {
		return "", fmt.Errorf("network %s already has a node named %q", n.ns, nd.cfg.Name)
	}
	if n.next > lastHost {
		return "", fmt.Errorf("network %s is full", n.ns)
	}
	host := n.next
	addr = fmt.Sprintf("%s%d", subnetPrefix, host)
	veth := fmt.Sprintf("veth%d", host) // the bridge's end; node names may be long
	if err := ip("netns", "add", nodeNS); err != nil {
		return "", err
	}
	for _, args := range [][]string{
		{"-n", n.ns, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", nodeNS},
		{"-n", n.ns, "link", "set", veth, "master", "br0", "up"},
		{"-n", nodeNS, "link", "set", "lo", "up"},
		{"-n", nodeNS, "addr", "add", fmt.Sprintf("%s/%d", addr, subnetBits), "dev", "eth0"},
		{"-n", nodeNS, "link", "set", "eth0", "up"},
	} {
		if err := ip(args...); err != nil {
			_ = ip("netns", "del", nodeNS)
			return "", err
		}
	}
	n.next++
	nd.ip = addr
	n.nodes[nd.cfg.Name] = nd
	return addr, n.writeHostsLocked()
}

// detach forgets a node (its namespace, and the veth with it, is removed
// by the node).
func (n *Network) detach(nd *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes[nd.cfg.Name] == nd {
		delete(n.nodes, nd.cfg.Name)
	}
}

// writeHostsLocked gives every node an /etc/hosts naming all the nodes, so
// that they find each other by name as a cluster's nodes do; it is
// rewritten whenever a node joins.
func (n *Network) writeHostsLocked() error {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for name, nd := range n.nodes {
		fmt.Fprintf(&b, "%s\t%s\n", nd.ip, name)
	}
	var errs []error
	for _, nd := range n.nodes {
		errs = append(errs, writeFileAtomic(filepath.Join(nd.rootfs, "etc/hosts"), []byte(b.String()), 0o644))
	}
	return errors.Join(errs...)
}

// delNetns removes a network namespace that may be gone already (a sweep
// of a dead test's leftovers removed it).
func delNetns(name string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ip("netns", "del", name)
}

// ip runs iproute2's ip.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random name: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeFileAtomic replaces a file whole, so a node reading it never sees
// half of it.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".minilet-hosts.tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// requireRoot skips a test that needs root (namespaces, mounts, cgroups,
// nspawn) when it does not have it; CI runs as root, so there they run.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("node containers need root (nspawn, mounts, network namespaces, cgroups); CI runs as root")
	}
}
