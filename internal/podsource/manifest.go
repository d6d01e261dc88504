// Package podsource turns static pod manifests (a directory of files, an
// HTTP URL) into full snapshots of the pods each source wants running.
//
// Each source emits an Update holding every pod it currently defines
// (SET semantics), only when that set changed, and reports bad manifests
// through an OnError callback naming the file. The first snapshot is
// always sent, even when empty, so the consumer knows the source was read.
// The agent diffs each snapshot against the pods it runs from that source
// (pods are keyed by UID, and a static pod's UID is its content hash, so
// an edited manifest shows up as the old pod removed and a new one added,
// as in the kubelet).
package podsource

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// ManifestError is a manifest that cannot become a pod. It wraps
// errdefs.ErrInvalidArgument.
type ManifestError struct {
	Path string // file path or URL
	Doc  int    // 1-based document number in a multi-document file; 0 for the whole file
	Err  error
}

func (e *ManifestError) Error() string {
	if e.Doc > 0 {
		return fmt.Sprintf("manifest %s (document %d): %v", e.Path, e.Doc, e.Err)
	}
	return fmt.Sprintf("manifest %s: %v", e.Path, e.Err)
}

// Unwrap returns the cause and classifies it as invalid input.
func (e *ManifestError) Unwrap() []error { return []error{e.Err, errdefs.ErrInvalidArgument} }

// ParseManifest decodes data (YAML with one or more documents, or JSON) into
// pods ready to run: each document must be a v1 Pod (or v1 PodList / List of
// Pods); decoding is strict (unknown fields are errors naming the field);
// every pod's labels and annotations must pass the API server's limits
// (validateMetadata), then it gets podspec.SetDefaults and
// podspec.ApplyStatic, then podspec.Validate. Empty documents are skipped. Any error rejects the whole
// manifest: a half-applied file is harder to reason about than a rejected one.
func ParseManifest(data []byte, path, source, nodeName string, seen time.Time) ([]*v1.Pod, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, &ManifestError{Path: path, Err: err}
	}
	var pods []*v1.Pod
	for i, doc := range docs {
		got, err := decodeDocument(doc)
		if err != nil {
			return nil, &ManifestError{Path: path, Doc: docNumber(i, len(docs)), Err: err}
		}
		for _, pod := range got {
			if errs := validateMetadata(pod); len(errs) > 0 {
				return nil, &ManifestError{Path: path, Doc: docNumber(i, len(docs)),
					Err: fmt.Errorf("pod %q is invalid: %w", pod.Name, errs.ToAggregate())}
			}
			podspec.SetDefaults(pod)
			if err := podspec.ApplyStatic(pod, source, path, nodeName, seen); err != nil {
				return nil, &ManifestError{Path: path, Doc: docNumber(i, len(docs)), Err: err}
			}
			// Again with the static pod's own annotations, which count
			// towards the mirror pod's 256 KiB.
			if errs := append(podspec.Validate(pod), validateMetadata(pod)...); len(errs) > 0 {
				return nil, &ManifestError{Path: path, Doc: docNumber(i, len(docs)),
					Err: fmt.Errorf("pod %q is invalid: %w", pod.Name, errs.ToAggregate())}
			}
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

func docNumber(i, n int) int {
	if n == 1 {
		return 0
	}
	return i + 1
}

// splitDocuments returns the non-empty documents of a YAML stream or JSON
// text (JSON is YAML, one object per document).
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split YAML documents: %w", err)
		}
		if isEmptyDocument(doc) {
			continue
		}
		docs = append(docs, doc)
	}
}

// isEmptyDocument reports a document with nothing but whitespace and comments.
func isEmptyDocument(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

// decodeDocument decodes one document into pods. YAML is converted to JSON
// once (strictly: duplicate keys are errors) and everything after works on
// the JSON; a document that already is JSON skips the YAML parser, the
// slow part of decoding a large manifest.
func decodeDocument(doc []byte) ([]*v1.Pod, error) {
	j := doc
	if !json.Valid(doc) {
		var err error
		if j, err = yaml.YAMLToJSONStrict(doc); err != nil {
			return nil, fmt.Errorf("not a YAML or JSON object: %w", err)
		}
	}
	return decodeJSON(j)
}

// decodeJSON decodes one JSON object (a Pod or a list of them) into pods.
func decodeJSON(j []byte) ([]*v1.Pod, error) {
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return nil, fmt.Errorf("not a YAML or JSON object: %w", err)
	}
	switch {
	case tm.Kind == "Pod" && tm.APIVersion == "v1":
		var pod v1.Pod
		if err := unmarshalStrict(j, &pod); err != nil {
			return nil, fmt.Errorf("decode Pod: %w", err)
		}
		return []*v1.Pod{&pod}, nil
	case (tm.Kind == "PodList" || tm.Kind == "List") && tm.APIVersion == "v1":
		return decodeList(j)
	case tm.Kind == "":
		return nil, errors.New(`missing "kind": want kind Pod, apiVersion v1`)
	default:
		return nil, fmt.Errorf("kind %q apiVersion %q is not supported: want kind Pod, apiVersion v1", tm.Kind, tm.APIVersion)
	}
}

func decodeList(j []byte) ([]*v1.Pod, error) {
	var list struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := unmarshalStrict(j, &list); err != nil {
		return nil, fmt.Errorf("decode %s: %w", list.Kind, err)
	}
	pods := make([]*v1.Pod, 0, len(list.Items))
	for i, item := range list.Items {
		got, err := decodeJSON(item)
		if err != nil {
			return nil, fmt.Errorf("items[%d]: %w", i, err)
		}
		if len(got) != 1 {
			return nil, fmt.Errorf("items[%d]: nested lists are not supported", i)
		}
		pods = append(pods, got[0])
	}
	return pods, nil
}

// unmarshalStrict decodes JSON into v, matching field names case
// sensitively and rejecting unknown and duplicate fields with their full
// path (e.g. unknown field "spec.containers[0].imagePullPolicyy").
func unmarshalStrict(j []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
