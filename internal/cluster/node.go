package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/errdefs"
)

// LeaseNamespace holds the nodes' heartbeat Leases.
const LeaseNamespace = "kube-node-lease"

// Back-off between failed attempts while the API server is unreachable.
const (
	minRetry = 200 * time.Millisecond
	maxRetry = 7 * time.Second
)

// nodeStatus registers the Node and keeps its status and Lease fresh.
type nodeStatus struct {
	c      *Cluster
	source NodeSource // set by Start before its goroutines run

	mu         sync.Mutex
	node       *v1.Node // as the API server last returned it; nil until registered
	lastReport time.Time
	// ours names every resource this agent has reported in capacity in
	// this run: one it stops reporting (a device plugin gone past its
	// grace period) is removed from the Node, others' are kept.
	ours       map[v1.ResourceName]bool
	registered chan struct{}
	regOnce    sync.Once
}

func newNodeStatus(c *Cluster) *nodeStatus {
	return &nodeStatus{c: c, registered: make(chan struct{})}
}

// Registered is closed once the Node exists in the API server.
func (c *Cluster) Registered() <-chan struct{} { return c.node.registered }

// NodeUID is the registered Node's UID ("" before registration).
func (c *Cluster) NodeUID() types.UID {
	c.node.mu.Lock()
	defer c.node.mu.Unlock()
	if c.node.node == nil {
		return ""
	}
	return c.node.node.UID
}

// runStatus registers the node, then writes its status every
// NodeStatusUpdateFrequency when it changed (or NodeStatusReportFrequency
// passed). Failures are retried with back-off and never stop the loop.
func (n *nodeStatus) runStatus(ctx context.Context) {
	retry := minRetry
	for {
		err := n.syncOnce(ctx)
		wait := n.c.cfg.NodeStatusUpdateFrequency
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.c.log.Warn("node status not written, will retry", "node", n.c.cfg.NodeName, "retryIn", retry, "err", err)
			wait, retry = retry, min(2*retry, maxRetry)
		} else {
			retry = minRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-n.c.clock.After(wait):
		}
	}
}

// syncOnce registers the node if needed, else writes its status if due.
func (n *nodeStatus) syncOnce(ctx context.Context) error {
	n.mu.Lock()
	cur := n.node
	n.mu.Unlock()
	if cur == nil {
		return n.register(ctx)
	}
	return n.updateStatus(ctx, cur)
}

// register creates the Node, or adopts an existing one of the same name
// (adding the labels minilet sets).
func (n *nodeStatus) register(ctx context.Context) error {
	want := n.source()
	want.ResourceVersion, want.UID = "", ""
	want.CreationTimestamp = metav1.Time{}
	nodes := n.c.client.CoreV1().Nodes()
	got, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	switch {
	case err == nil:
		n.c.log.Info("node registered", "node", got.Name, "uid", got.UID)
	case apierrors.IsAlreadyExists(err):
		if got, err = nodes.Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
			return classify(err, "getting node "+want.Name)
		}
		if got, err = n.adoptLabels(ctx, got, want.Labels); err != nil {
			return err
		}
		n.c.log.Info("node adopted", "node", got.Name, "uid", got.UID)
	default:
		return classify(err, "registering node "+want.Name)
	}
	n.mu.Lock()
	n.node = got
	n.mu.Unlock()
	n.regOnce.Do(func() { close(n.registered) })
	// The create may have dropped status fields; write the status now.
	return n.write(ctx, got, want.Status)
}

// adoptLabels adds the labels minilet sets that an existing Node lacks.
func (n *nodeStatus) adoptLabels(ctx context.Context, node *v1.Node, labels map[string]string) (*v1.Node, error) {
	missing := map[string]string{}
	for k, v := range labels {
		if node.Labels[k] != v {
			missing[k] = v
		}
	}
	if len(missing) == 0 {
		return node, nil
	}
	patch, err := jsonPatchBytes(map[string]any{"metadata": map[string]any{"labels": missing}})
	if err != nil {
		return nil, err
	}
	got, err := n.c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, classify(err, "labelling node "+node.Name)
	}
	return got, nil
}

// updateStatus writes the node's status if it changed, ignoring heartbeat
// times, or if the last write is older than NodeStatusReportFrequency.
func (n *nodeStatus) updateStatus(ctx context.Context, cur *v1.Node) error {
	want := n.source().Status
	n.mu.Lock()
	due := n.c.clock.Since(n.lastReport) >= n.c.cfg.NodeStatusReportFrequency
	n.mu.Unlock()
	if !due && statusEqual(cur.Status, want, n.ownResources()) {
		return nil
	}
	return n.write(ctx, cur, want)
}

// write puts status on the node as the kubelet does: it reads the Node
// afresh and patches its status subresource with the difference
// (strategic merge), so nothing outside status (taints, unschedulable,
// labels others set) is ever sent back stale. The first argument is only
// what the caller had; the fresh read decides.
func (n *nodeStatus) write(ctx context.Context, _ *v1.Node, status v1.NodeStatus) error {
	nodes := n.c.client.CoreV1().Nodes()
	name := n.c.cfg.NodeName
	cur, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			n.forget() // deleted behind our back: register again
		}
		return classify(err, "getting node "+name)
	}
	if old, now := cur.Status.NodeInfo.BootID, status.NodeInfo.BootID; old != "" && now != "" && old != now {
		// The kubelet's words; recorded once, as the next read has the new ID.
		ref := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}}
		n.c.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, "Rebooted", "Node %s has been rebooted, boot id: %s", name, now)
	}
	n.mu.Lock()
	if n.ours == nil {
		n.ours = map[v1.ResourceName]bool{}
	}
	for name := range status.Capacity {
		n.ours[name] = true
	}
	n.mu.Unlock()
	patch, err := statusPatch(cur, mergeNodeStatus(cur.Status, status, n.ownResources()))
	if err != nil {
		return fmt.Errorf("status patch for node %s: %w", name, err)
	}
	got, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if apierrors.IsNotFound(err) {
			n.forget()
		}
		return classify(err, "patching status of node "+name)
	}
	n.mu.Lock()
	n.node, n.lastReport = got, n.c.clock.Now()
	n.mu.Unlock()
	return nil
}

// statusPatch is the strategic merge patch that turns cur's status into
// status, guarded by cur's UID (a Node deleted and re-created meanwhile
// is not patched).
func statusPatch(cur *v1.Node, status v1.NodeStatus) ([]byte, error) {
	before, err := json.Marshal(v1.Node{Status: cur.Status})
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(v1.Node{ObjectMeta: metav1.ObjectMeta{UID: cur.UID}, Status: status})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(before, after, v1.Node{})
}

// lostContact makes the next status report due. Once the node could not
// reach the API server, the Node there is as old as the gap: its heartbeat
// stopped, and the node lifecycle controller may have set Ready to Unknown
// meanwhile, which the comparison with what this agent last wrote cannot
// see. So the first status sync that gets through writes the status in
// full instead of waiting out NodeStatusReportFrequency (5 min by
// default), and the node is Ready, with a fresh heartbeat, as soon as the
// API server is back.
func (n *nodeStatus) lostContact() {
	n.mu.Lock()
	n.lastReport = time.Time{}
	n.mu.Unlock()
}

func (n *nodeStatus) forget() {
	n.mu.Lock()
	n.node = nil
	n.mu.Unlock()
}

// mergeNodeStatus is the status to write: minilet's own fields, keeping
// what others own (images, volumes, config).
func mergeNodeStatus(cur, want v1.NodeStatus, ours map[v1.ResourceName]bool) v1.NodeStatus {
	out := cur
	out.Capacity, out.Allocatable = mergeResources(cur, want, ours)
	out.Phase, out.Addresses = want.Phase, want.Addresses
	out.DaemonEndpoints, out.NodeInfo = want.DaemonEndpoints, want.NodeInfo
	out.Conditions = mergeConditions(cur.Conditions, want.Conditions)
	return out
}

// ownResources is a copy of ours.
func (n *nodeStatus) ownResources() map[v1.ResourceName]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[v1.ResourceName]bool, len(n.ours))
	for k := range n.ours {
		out[k] = true
	}
	return out
}

// mergeResources is the capacity and allocatable to write: this agent's,
// plus the extended resources others advertise on the Node (patched into
// its status, as the Kubernetes docs show for node-level extended
// resources), which the kubelet keeps and makes allocatable as they are.
// A resource this agent reported before in this run (ours) and reports
// no longer is dropped.
func mergeResources(cur, want v1.NodeStatus, ours map[v1.ResourceName]bool) (capacity, allocatable v1.ResourceList) {
	capacity, allocatable = want.Capacity.DeepCopy(), want.Allocatable.DeepCopy()
	for name, q := range cur.Capacity {
		if _, mine := want.Capacity[name]; mine || ours[name] || !isExtendedResource(name) {
			continue
		}
		if capacity == nil {
			capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
		}
		if allocatable == nil {
			allocatable = v1.ResourceList{}
		}
		capacity[name] = q.DeepCopy()
		allocatable[name] = q.DeepCopy()
	}
	return capacity, allocatable
}

// isExtendedResource reports whether name is an extended resource
// (example.com/dongle) rather than a native one.
func isExtendedResource(name v1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}

// mergeConditions replaces minilet's conditions and keeps others' (set by
// node problem detectors, say).
func mergeConditions(cur, want []v1.NodeCondition) []v1.NodeCondition {
	ours := map[v1.NodeConditionType]bool{}
	for _, c := range want {
		ours[c.Type] = true
	}
	out := append([]v1.NodeCondition(nil), want...)
	for _, c := range cur {
		if !ours[c.Type] {
			out = append(out, c)
		}
	}
	return out
}

// statusEqual compares the fields minilet writes, ignoring heartbeats.
func statusEqual(cur, want v1.NodeStatus, ours map[v1.ResourceName]bool) bool {
	merged := mergeNodeStatus(cur, want, ours)
	strip := func(s v1.NodeStatus) v1.NodeStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return s
	}
	return apiequality.Semantic.DeepEqual(strip(cur), strip(merged))
}

// runLease renews the node's Lease every quarter of its duration; a
// failed renewal is retried with back-off.
func (n *nodeStatus) runLease(ctx context.Context) {
	interval := time.Duration(n.c.cfg.LeaseDurationSeconds) * time.Second / 4
	retry := minRetry
	var lease *coordinationv1.Lease
	for {
		var err error
		lease, err = n.renewLease(ctx, lease)
		wait := interval
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.c.log.Warn("node lease not renewed, will retry", "node", n.c.cfg.NodeName, "retryIn", retry, "err", err)
			n.lostContact()
			wait, retry = retry, min(2*retry, maxRetry)
		} else {
			retry = minRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-n.c.clock.After(wait):
		}
	}
}

// renewLease updates the lease the API server last returned (one
// request), or gets or creates it when there is none yet.
func (n *nodeStatus) renewLease(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := n.c.client.CoordinationV1().Leases(LeaseNamespace)
	name := n.c.cfg.NodeName
	now := metav1.NewMicroTime(n.c.clock.Now())
	if lease != nil {
		upd := lease.DeepCopy()
		n.fillLease(upd, now)
		got, err := leases.Update(ctx, upd, metav1.UpdateOptions{})
		if err == nil {
			return got, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return lease, classify(err, "renewing lease "+name)
		}
	}
	got, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LeaseNamespace}}
		n.fillLease(fresh, now)
		got, err = leases.Create(ctx, fresh, metav1.CreateOptions{})
		return got, classify(err, "creating lease "+name)
	}
	if err != nil {
		return nil, classify(err, "getting lease "+name)
	}
	upd := got.DeepCopy()
	n.fillLease(upd, now)
	got, err = leases.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, classify(err, "renewing lease "+name)
	}
	return got, nil
}

func (n *nodeStatus) fillLease(l *coordinationv1.Lease, now metav1.MicroTime) {
	l.Spec.HolderIdentity = ptr.To(n.c.cfg.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(n.c.cfg.LeaseDurationSeconds)
	l.Spec.RenewTime = &now
	if len(l.OwnerReferences) == 0 {
		if uid := n.c.NodeUID(); uid != "" {
			l.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: n.c.cfg.NodeName, UID: uid,
			}}
		}
	}
}

var errNotRegistered = errors.New("node not registered yet")

// nodeOwner is the owner reference mirror pods carry.
func (c *Cluster) nodeOwner() (metav1.OwnerReference, error) {
	uid := c.NodeUID()
	if uid == "" {
		return metav1.OwnerReference{}, fmt.Errorf("node %s: %w: %w", c.cfg.NodeName, errNotRegistered, errdefs.ErrUnavailable)
	}
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: c.cfg.NodeName, UID: uid, Controller: ptr.To(true)}, nil
}
