// Package objects serves ConfigMaps and Secrets to a standalone agent from
// a folder of ordinary Kubernetes YAML (or JSON) files, the way the API
// server serves them in a cluster: pods' configMap and secret volumes and
// env read them with the same code in both modes. The folder is read at
// every request, so an edited file reaches running pods within the sync
// period, as an update through the API server does.
package objects

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/minilet/minilet/internal/boundedread"
	"github.com/minilet/minilet/internal/errdefs"
)

// Limits on what one read of the folder takes in. A file that is not a
// regular file or is larger than MaxFileSize is skipped and named in the
// error; once the files read add up to more than MaxFolderSize, the rest
// are skipped. Each ConfigMap's and Secret's data must fit the API
// server's limit, v1.MaxSecretSize (1 MiB).
const (
	MaxFileSize   = 10 << 20 // one file, as one static pod manifest
	MaxFolderSize = 64 << 20 // all files of one read together
)

// Folder reads ConfigMaps and Secrets from the files of one directory
// (*.yaml, *.yml, *.json; hidden files skipped). A file may hold several
// documents and v1 Lists. Objects without a namespace are in "default".
type Folder struct {
	dir       string
	maxFolder int64 // MaxFolderSize; smaller in tests
}

// NewFolder returns a Folder over dir.
func NewFolder(dir string) *Folder { return &Folder{dir: dir, maxFolder: MaxFolderSize} }

// ConfigMap returns namespace/name, or an error wrapping
// errdefs.ErrNotFound that names the folder (and any file it could not
// read, which may be where the object was meant to be).
func (f *Folder) ConfigMap(_ context.Context, namespace, name string) (*v1.ConfigMap, error) {
	set, err := f.load()
	if cm, ok := set.configMaps[namespace+"/"+name]; ok {
		return cm, nil
	}
	return nil, notFound("configmap", namespace, name, f.dir, err)
}

// Secret returns namespace/name, as ConfigMap does.
func (f *Folder) Secret(_ context.Context, namespace, name string) (*v1.Secret, error) {
	set, err := f.load()
	if s, ok := set.secrets[namespace+"/"+name]; ok {
		return s, nil
	}
	return nil, notFound("secret", namespace, name, f.dir, err)
}

// ServiceAccountToken fails: tokens need an API server to issue them.
func (f *Folder) ServiceAccountToken(_ context.Context, pod *v1.Pod, _ authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequestStatus, error) {
	return nil, fmt.Errorf("service account token for pod %s/%s: a standalone node has no API server to issue it: %w", pod.Namespace, pod.Name, errdefs.ErrNotFound)
}

// PersistentVolumeClaim fails: claims are bound to volumes by the
// cluster's controllers, which a standalone node has not (a hostPath
// volume in the pod serves the same purpose).
func (f *Folder) PersistentVolumeClaim(_ context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return nil, fmt.Errorf("persistentvolumeclaim %s/%s: a standalone node has no API server to bind claims to volumes; use a hostPath volume instead: %w", namespace, name, errdefs.ErrNotFound)
}

// PersistentVolume fails, as PersistentVolumeClaim does.
func (f *Folder) PersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	return nil, fmt.Errorf("persistentvolume %s: a standalone node has no API server to serve it: %w", name, errdefs.ErrNotFound)
}

func notFound(kind, ns, name, dir string, loadErr error) error {
	msg := fmt.Sprintf("%s %s/%s not found in %s", kind, ns, name, dir)
	if loadErr != nil {
		msg += " (files skipped: " + loadErr.Error() + ")"
	}
	return fmt.Errorf("%s: %w", msg, errdefs.ErrNotFound)
}

type objectSet struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	from       map[string]string // "kind ns/name" → file, to name duplicates
}

// load reads every file; objects of the files it could read are returned
// along with an error naming each file it could not.
func (f *Folder) load() (objectSet, error) {
	set := objectSet{configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}, from: map[string]string{}}
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return set, fmt.Errorf("reading %s: %w", f.dir, err)
	}
	var errs []error
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		n := e.Name()
		ext := filepath.Ext(n)
		if e.IsDir() || strings.HasPrefix(n, ".") || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	budget := f.maxFolder
	for _, n := range names {
		path := filepath.Join(f.dir, n)
		data, err := boundedread.File(path, MaxFileSize)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if budget -= int64(len(data)); budget < 0 {
			errs = append(errs, fmt.Errorf("%s: the folder's files add up to more than %s: this file and the ones after it are skipped",
				path, boundedread.FormatSize(f.maxFolder)))
			break
		}
		if err := set.addFile(path, data); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	return set, errors.Join(errs...)
}

func (s *objectSet) addFile(path string, data []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || string(bytes.TrimSpace(doc)) == "---" {
			continue
		}
		if err := s.addDocument(path, doc); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
	}
}

func (s *objectSet) addDocument(path string, doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("not a YAML or JSON object: %w", err)
	}
	if tm.APIVersion != "v1" {
		return fmt.Errorf("apiVersion %q kind %q: want v1 ConfigMap, Secret or List", tm.APIVersion, tm.Kind)
	}
	switch tm.Kind {
	case "ConfigMap":
		var cm v1.ConfigMap
		if err := strict(doc, &cm); err != nil {
			return fmt.Errorf("decode ConfigMap: %w", err)
		}
		if err := checkKeys("ConfigMap", cm.Name, keysOf(cm.Data), keysOf(cm.BinaryData)); err != nil {
			return err
		}
		if err := checkSize("ConfigMap", cm.Name, cm.Data, cm.BinaryData); err != nil {
			return err
		}
		defaultNamespace(&cm.ObjectMeta)
		return s.add(path, "ConfigMap", cm.ObjectMeta, func(k string) { s.configMaps[k] = &cm })
	case "Secret":
		var sec v1.Secret
		if err := strict(doc, &sec); err != nil {
			return fmt.Errorf("decode Secret: %w", err)
		}
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		for k, v := range sec.StringData { // as the API server merges it
			sec.Data[k] = []byte(v)
		}
		sec.StringData = nil
		if err := checkKeys("Secret", sec.Name, keysOf(sec.Data)); err != nil {
			return err
		}
		if err := checkSize("Secret", sec.Name, nil, sec.Data); err != nil {
			return err
		}
		defaultNamespace(&sec.ObjectMeta)
		return s.add(path, "Secret", sec.ObjectMeta, func(k string) { s.secrets[k] = &sec })
	case "List":
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := yaml.Unmarshal(doc, &list); err != nil {
			return fmt.Errorf("decode List: %w", err)
		}
		for i, it := range list.Items {
			if err := s.addDocument(path, it); err != nil {
				return fmt.Errorf("items[%d]: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("kind %q is not served here: want ConfigMap, Secret or List", tm.Kind)
}

func (s *objectSet) add(path, kind string, meta metav1.ObjectMeta, put func(key string)) error {
	if meta.Name == "" {
		return fmt.Errorf("%s: metadata.name is required", kind)
	}
	key := meta.Namespace + "/" + meta.Name
	if prev, dup := s.from[kind+" "+key]; dup {
		return fmt.Errorf("%s %s is also defined in %s", kind, key, prev)
	}
	s.from[kind+" "+key] = path
	put(key)
	return nil
}

func defaultNamespace(m *metav1.ObjectMeta) {
	if m.Namespace == "" {
		m.Namespace = metav1.NamespaceDefault
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkKeys applies the API server's rule for data keys.
func checkKeys(kind, name string, sets ...[]string) error {
	for _, keys := range sets {
		for _, k := range keys {
			if msgs := validation.IsConfigMapKey(k); len(msgs) > 0 {
				return fmt.Errorf("%s %q: data key %q: %s", kind, name, k, strings.Join(msgs, "; "))
			}
		}
	}
	return nil
}

// checkSize applies the API server's limit on the data of a ConfigMap or
// Secret: its values together at most v1.MaxSecretSize bytes.
func checkSize(kind, name string, text map[string]string, binary map[string][]byte) error {
	total := 0
	for _, v := range text {
		total += len(v)
	}
	for _, v := range binary {
		total += len(v)
	}
	if total > v1.MaxSecretSize {
		return fmt.Errorf("%s %q: data is %d bytes, more than the limit of %s", kind, name, total, boundedread.FormatSize(v1.MaxSecretSize))
	}
	return nil
}

// strict decodes YAML or JSON into v, rejecting unknown and duplicate
// fields with their path.
func strict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	errs, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}
