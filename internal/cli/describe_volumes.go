package cli

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// describeMounts prints a container's volume mounts as kubectl describe
// does: "PATH from VOLUME (rw|ro[,path=\"SUB\"])", sorted by path.
func (d *describer) describeMounts(mounts []v1.VolumeMount) {
	if len(mounts) == 0 {
		d.line(2, "Mounts:\t<none>")
		return
	}
	d.line(2, "Mounts:")
	sorted := append([]v1.VolumeMount(nil), mounts...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].MountPath < sorted[j].MountPath })
	for _, m := range sorted {
		flags := []string{"rw"}
		if m.ReadOnly {
			flags[0] = "ro"
		}
		if m.SubPath != "" {
			flags = append(flags, fmt.Sprintf("path=%q", m.SubPath))
		}
		d.line(3, "%s from %s (%s)", m.MountPath, m.Name, strings.Join(flags, ","))
	}
}

// describeVolumes prints the pod's volumes with kubectl describe's type
// lines and fields.
func (d *describer) describeVolumes(vols []v1.Volume) {
	if len(vols) == 0 {
		d.line(0, "Volumes:\t<none>")
		return
	}
	d.line(0, "Volumes:")
	for _, v := range vols {
		d.line(1, "%s:", v.Name)
		src := v.VolumeSource
		switch {
		case src.EmptyDir != nil:
			d.line(2, "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)")
			d.line(2, "Medium:\t%s", src.EmptyDir.Medium)
			limit := "<unset>"
			if src.EmptyDir.SizeLimit != nil {
				limit = src.EmptyDir.SizeLimit.String()
			}
			d.line(2, "SizeLimit:\t%s", limit)
		case src.HostPath != nil:
			typ := ""
			if src.HostPath.Type != nil {
				typ = string(*src.HostPath.Type)
			}
			d.line(2, "Type:\tHostPath (bare host directory volume)")
			d.line(2, "Path:\t%s", src.HostPath.Path)
			d.line(2, "HostPathType:\t%s", typ)
		case src.ConfigMap != nil:
			d.line(2, "Type:\tConfigMap (a volume populated by a ConfigMap)")
			d.line(2, "Name:\t%s", src.ConfigMap.Name)
			d.line(2, "Optional:\t%v", src.ConfigMap.Optional != nil && *src.ConfigMap.Optional)
		case src.Secret != nil:
			d.line(2, "Type:\tSecret (a volume populated by a Secret)")
			d.line(2, "SecretName:\t%s", src.Secret.SecretName)
			d.line(2, "Optional:\t%v", src.Secret.Optional != nil && *src.Secret.Optional)
		case src.PersistentVolumeClaim != nil:
			d.line(2, "Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)")
			d.line(2, "ClaimName:\t%s", src.PersistentVolumeClaim.ClaimName)
			d.line(2, "ReadOnly:\t%v", src.PersistentVolumeClaim.ReadOnly)
		case src.DownwardAPI != nil:
			d.line(2, "Type:\tDownwardAPI (a volume populated by information about the pod)")
			d.line(2, "Items:")
			for _, it := range src.DownwardAPI.Items {
				from := ""
				switch {
				case it.FieldRef != nil:
					from = it.FieldRef.FieldPath
				case it.ResourceFieldRef != nil:
					from = it.ResourceFieldRef.Resource
				}
				d.line(3, "%s -> %s", from, it.Path)
			}
		case src.Projected != nil:
			d.line(2, "Type:\tProjected (a volume that contains injected data from multiple sources)")
			for _, ps := range src.Projected.Sources {
				switch {
				case ps.ServiceAccountToken != nil:
					exp := int64(3600)
					if ps.ServiceAccountToken.ExpirationSeconds != nil {
						exp = *ps.ServiceAccountToken.ExpirationSeconds
					}
					d.line(2, "TokenExpirationSeconds:\t%d", exp)
				case ps.ConfigMap != nil:
					d.line(2, "ConfigMapName:\t%s", ps.ConfigMap.Name)
					d.line(2, "Optional:\t%v", ps.ConfigMap.Optional != nil && *ps.ConfigMap.Optional)
				case ps.Secret != nil:
					d.line(2, "SecretName:\t%s", ps.Secret.Name)
					d.line(2, "Optional:\t%v", ps.Secret.Optional != nil && *ps.Secret.Optional)
				case ps.DownwardAPI != nil:
					d.line(2, "DownwardAPI:\ttrue")
				}
			}
		default:
			d.line(2, "<unknown>")
		}
	}
}
