// Package podspec holds pure helpers for pod manifests: the defaults the API
// server would apply (SetDefaults), the identity the kubelet gives static
// pods (ApplyStatic: NAME-NODENAME, content-hash UID, config annotations,
// NoExecute toleration), and validation of the fields minilet uses
// (Validate), reported with Kubernetes field paths.
package podspec

import (
	"crypto/md5" //nolint:gosec // a content fingerprint, as the kubelet uses, not a security boundary
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotation keys the kubelet puts on pods that come from a config source.
const (
	// AnnotationConfigSource names the source: SourceFile, SourceHTTP or SourceAPI.
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigHash is the content hash of a static pod; equal to its UID.
	AnnotationConfigHash = "kubernetes.io/config.hash"
	// AnnotationConfigSeen is when the agent first saw this version of the pod (RFC3339).
	AnnotationConfigSeen = "kubernetes.io/config.seen"
	// AnnotationConfigMirror marks a mirror pod in the API server; its value
	// is the MirrorHash of the static pod it mirrors.
	AnnotationConfigMirror = "kubernetes.io/config.mirror"
)

// Source names, as the kubelet spells them in AnnotationConfigSource.
const (
	SourceFile = "file"
	SourceHTTP = "http"
	SourceAPI  = "api"
)

// DefaultNamespace is the namespace of a manifest that names none.
const DefaultNamespace = "default"

// StaticPodName is the name the kubelet gives a static pod: NAME-NODENAME,
// with the node name lowercased.
func StaticPodName(name, nodeName string) string {
	return name + "-" + strings.ToLower(nodeName)
}

// IsStatic reports whether the pod came from a file or HTTP source.
func IsStatic(pod *v1.Pod) bool {
	s := pod.Annotations[AnnotationConfigSource]
	return s == SourceFile || s == SourceHTTP
}

// MirrorHash is what a mirror pod of the static pod carries in
// AnnotationConfigMirror: the pod's config hash, else its UID. A mirror
// with another value mirrors another version of the pod.
func MirrorHash(static *v1.Pod) string {
	if h := static.Annotations[AnnotationConfigHash]; h != "" {
		return h
	}
	return string(static.UID)
}

// FullName is "NAMESPACE/NAME", the key under which pods are unique.
func FullName(pod *v1.Pod) string {
	return pod.Namespace + "/" + pod.Name
}

// ContentUID computes the UID the kubelet would give a static pod: a hash of
// the pod as decoded (and defaulted), the node name and where it came from
// (file path or URL). Editing the manifest, moving it or running it on
// another node gives a new UID.
func ContentUID(pod *v1.Pod, nodeName, sourcePath string) (types.UID, error) {
	h := md5.New() //nolint:gosec // fingerprint only
	if err := writeCanonical(h, pod); err != nil {
		return "", err
	}
	_, _ = fmt.Fprintf(h, "\x00node:%s\x00source:%s", nodeName, sourcePath) // hash writes never fail
	return types.UID(hex.EncodeToString(h.Sum(nil))), nil
}

// writeCanonical writes a deterministic encoding of the pod (encoding/json
// orders struct fields by declaration and map keys by sort order).
func writeCanonical(w io.Writer, pod *v1.Pod) error {
	if err := json.NewEncoder(w).Encode(pod); err != nil {
		return fmt.Errorf("encode pod %q for hashing: %w", pod.Name, err)
	}
	return nil
}

// ApplyStatic turns a decoded, defaulted manifest into the pod the agent
// runs, as the kubelet does for static pods:
//   - UID, when the manifest sets none, is ContentUID (computed first, so it
//     covers the manifest as written plus defaults, not what is added here);
//   - name becomes NAME-NODENAME; namespace defaults to "default";
//   - spec.nodeName is the node;
//   - annotations config.source=source, config.hash=UID, config.seen=seen;
//   - a toleration for every NoExecute taint (static pods are not evicted by
//     node taints);
//   - status.phase is Pending.
//
// source is SourceFile or SourceHTTP; sourcePath is the file path or URL.
func ApplyStatic(pod *v1.Pod, source, sourcePath, nodeName string, seen time.Time) error {
	if pod.UID == "" {
		uid, err := ContentUID(pod, nodeName, sourcePath)
		if err != nil {
			return err
		}
		pod.UID = uid
	}
	if pod.Name != "" {
		pod.Name = StaticPodName(pod.Name, nodeName)
	}
	if pod.Namespace == "" {
		pod.Namespace = DefaultNamespace
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationConfigSource] = source
	pod.Annotations[AnnotationConfigHash] = string(pod.UID)
	pod.Annotations[AnnotationConfigSeen] = seen.UTC().Format(time.RFC3339Nano)
	addNoExecuteToleration(pod)
	pod.Status.Phase = v1.PodPending
	return nil
}

// addNoExecuteToleration adds {operator: Exists, effect: NoExecute} unless
// an identical toleration is already there.
func addNoExecuteToleration(pod *v1.Pod) {
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	for _, t := range pod.Spec.Tolerations {
		if t.Key == "" && t.Operator == want.Operator && t.Effect == want.Effect && t.Value == "" {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, want)
}
