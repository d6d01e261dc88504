package volumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/errdefs"
)

func claimVolume(name, claim string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func boundClaim(ns, name, uid, volume string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: volume},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
}

func onNode(node string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
}

func localPV(name, path, claimUID string, aff *v1.VolumeNodeAffinity) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: path}},
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "data", UID: types.UID(claimUID)},
			NodeAffinity:           aff,
		},
	}
}

// A claim resolves to its local volume's path once it is Bound (until
// then Setup fails and Path has nothing); Teardown forgets it and leaves
// the volume's content alone.
func TestClaimOfLocalVolume(t *testing.T) {
	m, o := newManager(t)
	ctx := context.Background()
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := testPod(claimVolume("store", "data", false))
	pending := boundClaim("ns", "data", "claim-1", "")
	pending.Status.Phase = v1.ClaimPending
	o.pvcs["ns/data"] = pending
	err := m.Setup(ctx, pod)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `volume "store": persistentVolumeClaim "data" is not bound to a persistent volume yet (phase Pending)`) {
		t.Fatalf("pending claim: %v", err)
	}
	if _, err := m.Path(pod, &pod.Spec.Volumes[0]); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Path of a claim not set up: %v", err)
	}

	o.pvcs["ns/data"] = boundClaim("ns", "data", "claim-1", "pv-local")
	o.pvs["pv-local"] = localPV("pv-local", local, "claim-1", onNode("node-a"))
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Path(pod, &pod.Spec.Volumes[0]); err != nil || got != local {
		t.Fatalf("Path = %q, %v; want %s", got, err, local)
	}
	if err := m.Teardown(pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Path(pod, &pod.Spec.Volumes[0]); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Path after Teardown: %v", err)
	}
	if read(t, filepath.Join(local, "kept")) != "x" {
		t.Error("teardown touched the local volume")
	}
}

// What cannot be mounted here is an error naming the volume, the claim
// and the reason.
func TestClaimErrors(t *testing.T) {
	m, o := newManager(t)
	ctx := context.Background()
	missingDir := filepath.Join(t.TempDir(), "missing")
	created := filepath.Join(t.TempDir(), "made", "here")
	for _, tc := range []struct {
		name string
		pv   *v1.PersistentVolume
		want string // "" = no error
	}{
		{"other node", localPV("pv", t.TempDir(), "claim-1", onNode("node-b")),
			`volume "store": persistentVolumeClaim "data" (persistentVolume "pv"): its nodeAffinity does not allow node "node-a"`},
		{"bound to another claim", localPV("pv", t.TempDir(), "claim-2", onNode("node-a")),
			`(persistentVolume "pv"): the volume is not bound back to this claim yet`},
		{"missing local path", localPV("pv", missingDir, "claim-1", onNode("node-a")),
			`(persistentVolume "pv"): local path: stat ` + missingDir},
		{"nfs", func() *v1.PersistentVolume {
			pv := localPV("pv", "", "claim-1", nil)
			pv.Spec.Local, pv.Spec.NFS = nil, &v1.NFSVolumeSource{Server: "nfs", Path: "/x"}
			return pv
		}(), `volume "store": persistentVolumeClaim "data" (persistentVolume "pv"): nfs persistent volumes are not supported on this node`},
		{"block", func() *v1.PersistentVolume {
			pv := localPV("pv", t.TempDir(), "claim-1", onNode("node-a"))
			pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
			return pv
		}(), `volumeMode Block is not supported on this node`},
		{"hostPath type check", func() *v1.PersistentVolume {
			pv := localPV("pv", "", "claim-1", nil)
			pv.Spec.Local, pv.Spec.HostPath = nil, &v1.HostPathVolumeSource{Path: missingDir, Type: ptr.To(v1.HostPathDirectory)}
			return pv
		}(), `(persistentVolume "pv"): hostPath type check failed`},
		{"hostPath DirectoryOrCreate", func() *v1.PersistentVolume {
			pv := localPV("pv", "", "claim-1", onNode("node-a"))
			pv.Spec.Local, pv.Spec.HostPath = nil, &v1.HostPathVolumeSource{Path: created, Type: ptr.To(v1.HostPathDirectoryOrCreate)}
			return pv
		}(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(claimVolume("store", "data", false))
			o.pvcs["ns/data"] = boundClaim("ns", "data", "claim-1", "pv")
			o.pvs["pv"] = tc.pv
			err := m.Setup(ctx, pod)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := m.Path(pod, &pod.Spec.Volumes[0]); got != created {
					t.Errorf("Path = %q, want %s", got, created)
				}
				if fi, err := os.Stat(created); err != nil || !fi.IsDir() {
					t.Errorf("DirectoryOrCreate did not create %s: %v", created, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Setup = %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
}

// A standalone node (no Objects) says why a claim cannot be mounted.
func TestClaimWithoutObjects(t *testing.T) {
	m, err := New(Config{PodsDir: t.TempDir(), NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Setup(context.Background(), testPod(claimVolume("store", "data", false)))
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `volume "store": persistentVolumeClaim "data": this node has no API server`) {
		t.Fatalf("Setup = %v", err)
	}
}

func TestMatchesNode(t *testing.T) {
	labels := map[string]string{v1.LabelHostname: "node-a", "zone": "z1", "gen": "5"}
	req := func(key string, op v1.NodeSelectorOperator, vals ...string) v1.NodeSelectorRequirement {
		return v1.NodeSelectorRequirement{Key: key, Operator: op, Values: vals}
	}
	term := func(exprs ...v1.NodeSelectorRequirement) v1.NodeSelectorTerm {
		return v1.NodeSelectorTerm{MatchExpressions: exprs}
	}
	for _, tc := range []struct {
		name  string
		terms []v1.NodeSelectorTerm
		want  bool
	}{
		{"hostname In", []v1.NodeSelectorTerm{term(req(v1.LabelHostname, v1.NodeSelectorOpIn, "node-b", "node-a"))}, true},
		{"hostname NotIn", []v1.NodeSelectorTerm{term(req(v1.LabelHostname, v1.NodeSelectorOpNotIn, "node-a"))}, false},
		{"requirements are ANDed", []v1.NodeSelectorTerm{term(req("zone", v1.NodeSelectorOpExists), req("gen", v1.NodeSelectorOpGt, "6"))}, false},
		{"terms are ORed", []v1.NodeSelectorTerm{term(req("zone", v1.NodeSelectorOpDoesNotExist)), term(req("gen", v1.NodeSelectorOpLt, "6"))}, true},
		{"an empty term selects nothing", []v1.NodeSelectorTerm{{}}, false},
		{"metadata.name field", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{req("metadata.name", v1.NodeSelectorOpIn, "node-a")}}}, true},
		{"metadata.name NotIn", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{req("metadata.name", v1.NodeSelectorOpNotIn, "node-a")}}}, false},
	} {
		got, err := matchesNode(&v1.NodeSelector{NodeSelectorTerms: tc.terms}, "node-a", labels)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := matchesNode(&v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{term(req("gen", v1.NodeSelectorOpGt, "x"))}}, "node-a", labels); err == nil {
		t.Error("Gt with a non-number: no error")
	}
}
