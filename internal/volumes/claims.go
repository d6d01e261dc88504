package volumes

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/errdefs"
)

// claimKey names one persistentVolumeClaim volume of one pod.
type claimKey struct {
	pod    types.UID
	volume string
}

// claimPath resolves a persistentVolumeClaim volume to the host path of
// the PersistentVolume bound to it, as the kubelet's volume manager
// does for the in-tree local and hostPath types: the claim must be Bound
// and its volume bound back to it, usable on this node (nodeAffinity),
// in Filesystem mode and of a type this node can mount.
func (m *Manager) claimPath(ctx context.Context, pod *v1.Pod, src *v1.PersistentVolumeClaimVolumeSource) (string, error) {
	what := fmt.Sprintf("persistentVolumeClaim %q", src.ClaimName)
	if m.cfg.Objects == nil {
		return "", fmt.Errorf("%s: %w", what, errNoObjects)
	}
	pvc, err := m.cfg.Objects.PersistentVolumeClaim(ctx, pod.Namespace, src.ClaimName)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if pvc.DeletionTimestamp != nil {
		return "", fmt.Errorf("%s is being deleted: %w", what, errdefs.ErrUnavailable)
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		phase := pvc.Status.Phase
		if phase == "" {
			phase = v1.ClaimPending
		}
		return "", fmt.Errorf("%s is not bound to a persistent volume yet (phase %s): %w", what, phase, errdefs.ErrUnavailable)
	}
	pv, err := m.cfg.Objects.PersistentVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	what = fmt.Sprintf("%s (persistentVolume %q)", what, pv.Name)
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return "", fmt.Errorf("%s: the volume is not bound back to this claim yet: %w", what, errdefs.ErrUnavailable)
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		return "", fmt.Errorf("%s: volumeMode Block is not supported on this node: %w", what, errdefs.ErrInvalidArgument)
	}
	if aff := pv.Spec.NodeAffinity; aff != nil && aff.Required != nil {
		ok, err := matchesNode(aff.Required, m.cfg.NodeName, m.nodeLabels())
		if err != nil {
			return "", fmt.Errorf("%s: nodeAffinity: %w: %w", what, err, errdefs.ErrInvalidArgument)
		}
		if !ok {
			return "", fmt.Errorf("%s: its nodeAffinity does not allow node %q: %w", what, m.cfg.NodeName, errdefs.ErrInvalidArgument)
		}
	}
	switch {
	case pv.Spec.Local != nil:
		path := pv.Spec.Local.Path
		fi, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("%s: local path: %w", what, err)
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s: local path %s is not a directory: %w", what, path, errdefs.ErrInvalidArgument)
		}
		return path, nil
	case pv.Spec.HostPath != nil:
		if err := prepareHostPath(pv.Spec.HostPath.Path, pv.Spec.HostPath.Type); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return pv.Spec.HostPath.Path, nil
	}
	return "", fmt.Errorf("%s: %s persistent volumes are not supported on this node (only local and hostPath are): %w",
		what, pvKind(&pv.Spec.PersistentVolumeSource), errdefs.ErrInvalidArgument)
}

// rememberClaim records where pod's claim volume is, for Path.
func (m *Manager) rememberClaim(uid types.UID, volume, path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claims[claimKey{uid, volume}] = path
}

// claimed returns the path Setup resolved for pod's claim volume.
func (m *Manager) claimed(uid types.UID, volume string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.claims[claimKey{uid, volume}]
	return p, ok
}

// nodeLabels are the labels node affinity is matched against.
func (m *Manager) nodeLabels() map[string]string {
	if m.cfg.NodeLabels != nil {
		return m.cfg.NodeLabels()
	}
	return map[string]string{
		v1.LabelHostname:   m.cfg.NodeName,
		v1.LabelOSStable:   runtime.GOOS,
		v1.LabelArchStable: runtime.GOARCH,
	}
}

// matchesNode reports whether a node selector (its terms ORed, each
// term's requirements ANDed) selects the node named name with labels.
// A term without requirements selects nothing, as in the API.
func matchesNode(sel *v1.NodeSelector, name string, nodeLabels map[string]string) (bool, error) {
	for _, term := range sel.NodeSelectorTerms {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			continue
		}
		ok, err := matchesTerm(term, name, nodeLabels)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func matchesTerm(term v1.NodeSelectorTerm, name string, nodeLabels map[string]string) (bool, error) {
	for _, e := range term.MatchExpressions {
		op, ok := selectorOps[e.Operator]
		if !ok {
			return false, fmt.Errorf("operator %q is not a node selector operator", e.Operator)
		}
		r, err := labels.NewRequirement(e.Key, op, e.Values)
		if err != nil {
			return false, err
		}
		if !r.Matches(labels.Set(nodeLabels)) {
			return false, nil
		}
	}
	for _, f := range term.MatchFields {
		if f.Key != "metadata.name" {
			return false, fmt.Errorf("field %q cannot select nodes (only metadata.name can)", f.Key)
		}
		switch f.Operator {
		case v1.NodeSelectorOpIn:
			if !slices.Contains(f.Values, name) {
				return false, nil
			}
		case v1.NodeSelectorOpNotIn:
			if slices.Contains(f.Values, name) {
				return false, nil
			}
		default:
			return false, fmt.Errorf("operator %q cannot select fields (only In and NotIn can)", f.Operator)
		}
	}
	return true, nil
}

var selectorOps = map[v1.NodeSelectorOperator]selection.Operator{
	v1.NodeSelectorOpIn:           selection.In,
	v1.NodeSelectorOpNotIn:        selection.NotIn,
	v1.NodeSelectorOpExists:       selection.Exists,
	v1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	v1.NodeSelectorOpGt:           selection.GreaterThan,
	v1.NodeSelectorOpLt:           selection.LessThan,
}

// pvKind names a persistent volume's type for messages.
func pvKind(s *v1.PersistentVolumeSource) string {
	switch {
	case s.CSI != nil:
		return "csi"
	case s.NFS != nil:
		return "nfs"
	case s.ISCSI != nil:
		return "iscsi"
	case s.FC != nil:
		return "fc"
	case s.RBD != nil:
		return "rbd"
	case s.CephFS != nil:
		return "cephfs"
	case s.Glusterfs != nil:
		return "glusterfs"
	case s.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case s.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case s.AzureDisk != nil:
		return "azureDisk"
	case s.AzureFile != nil:
		return "azureFile"
	}
	return "this kind of"
}
