package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
)

// claim makes a PersistentVolumeClaim without a storage class (nothing
// provisions here).
func (e *env) claim(name string) *v1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := e.srv.Admin.CoreV1().PersistentVolumeClaims("default").Create(e.ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: ptr.To(""),
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating claim %s: %v", name, err)
	}
	return pvc
}

// bind binds claim to a new PersistentVolume from src by hand, as the
// controller-manager's persistentvolume-binder would (setup runs no
// controller-manager): the volume's claimRef, the claim's volumeName,
// then both statuses Bound.
func (e *env) bind(pvc *v1.PersistentVolumeClaim, pvName string, src v1.PersistentVolumeSource, aff *v1.VolumeNodeAffinity) {
	e.t.Helper()
	cs := e.srv.Admin.CoreV1()
	pv, err := cs.PersistentVolumes().Create(e.ctx, &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: src,
			NodeAffinity:           aff,
			ClaimRef:               &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating volume %s: %v", pvName, err)
	}
	e.t.Cleanup(func() { _ = cs.PersistentVolumes().Delete(e.ctx, pv.Name, metav1.DeleteOptions{}) })
	pv.Status.Phase = v1.VolumeBound
	if _, err := cs.PersistentVolumes().UpdateStatus(e.ctx, pv, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("volume %s Bound: %v", pvName, err)
	}
	cur, err := cs.PersistentVolumeClaims(pvc.Namespace).Get(e.ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cur.Spec.VolumeName = pvName
	if cur, err = cs.PersistentVolumeClaims(pvc.Namespace).Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("claim %s volumeName: %v", pvc.Name, err)
	}
	cur.Status.Phase = v1.ClaimBound
	cur.Status.AccessModes = pv.Spec.AccessModes
	cur.Status.Capacity = pv.Spec.Capacity
	if _, err := cs.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("claim %s Bound: %v", pvc.Name, err)
	}
}

// podEvents lists the messages of pod name's events with reason.
func (e *env) podEvents(name, reason string) []string {
	sel := fields.OneTermEqualSelector("involvedObject.name", name).String()
	list, err := e.srv.Admin.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out
}

func hostnameIs(node string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
}

// A pod of a claim not bound yet waits in ContainerCreating with
// FailedMount events; once the claim is bound to a local
// PersistentVolume on this node, the pod runs on the volume's directory
// (reading what is there, writing where the host sees it). A claim bound
// to a type this node cannot mount (nfs) says so in its FailedMount
// events.
func TestPodOnLocalPersistentVolume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "greeting"), []byte("hello from the volume\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir() // a host-image mount point that exists on no pod's behalf
	pvc := e.claim("data")
	p := e.pod("on-pv", "sh", "-c", fmt.Sprintf("cat %[1]s/greeting && echo written > %[1]s/out && exec sleep 1000", mnt))
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	p.Spec.Volumes = []v1.Volume{{Name: "store", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
	}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "store", MountPath: mnt}}
	e.create(p)

	e.eventually("FailedMount while the claim is Pending", func() (bool, string) {
		msgs := e.podEvents(p.Name, "FailedMount")
		for _, m := range msgs {
			if strings.Contains(m, `persistentVolumeClaim "data" is not bound to a persistent volume yet`) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("FailedMount events %q", msgs)
	})
	waiting := e.waitPod("the pod Pending in ContainerCreating", p.Name, func(p *v1.Pod) bool {
		if p.Status.Phase != v1.PodPending || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ContainerCreating"
	})
	if waiting.Status.ContainerStatuses[0].State.Running != nil {
		t.Fatal("the container ran without its volume")
	}

	e.bind(pvc, "local-"+e.a.NodeName, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: local}}, hostnameIs(e.a.NodeName))
	e.waitPod("the pod Running once the claim is bound", p.Name, runningReady)
	e.eventually("the pod read the volume and wrote to it", func() (bool, string) {
		raw, err := e.srv.Admin.CoreV1().Pods("default").GetLogs(p.Name, &v1.PodLogOptions{}).DoRaw(e.ctx)
		if err != nil {
			return false, err.Error()
		}
		out, _ := os.ReadFile(filepath.Join(local, "out"))
		return strings.Contains(string(raw), "hello from the volume") && string(out) == "written\n",
			fmt.Sprintf("log %q, out %q", raw, out)
	})

	remote := e.claim("remote")
	e.bind(remote, "nfs-"+e.a.NodeName, v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "192.0.2.1", Path: "/export"}}, nil)
	q := e.pod("on-nfs", "sleep", "1000")
	q.Spec.Volumes = []v1.Volume{{Name: "share", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: remote.Name},
	}}}
	e.create(q)
	want := `volume "share": persistentVolumeClaim "remote" (persistentVolume "nfs-` + e.a.NodeName + `"): nfs persistent volumes are not supported on this node`
	e.eventually("FailedMount naming the volume, the claim and the type", func() (bool, string) {
		msgs := e.podEvents(q.Name, "FailedMount")
		for _, m := range msgs {
			if strings.Contains(m, want) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("FailedMount events %q", msgs)
	})
	if got, err := e.get(q.Name); err != nil || got.Status.Phase != v1.PodPending {
		t.Errorf("a pod without its volume: %v %v", got.Status.Phase, err)
	}
}
