package objects

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFolderServesConfigMapsAndSecrets(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "app.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: prod}
data: {password: aHVudGVyMg==}
stringData: {user: admin}
`)
	write(t, dir, "list.json", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"},"binaryData":{"b":"AAE="}}]}`)
	write(t, dir, "notes.txt", "not an object")
	write(t, dir, ".hidden.yaml", "garbage: [")
	f := NewFolder(dir)
	ctx := context.Background()

	cm, err := f.ConfigMap(ctx, "default", "settings")
	if err != nil || cm.Data["greeting"] != "hello" {
		t.Fatalf("settings: %+v %v", cm, err)
	}
	s, err := f.Secret(ctx, "prod", "creds")
	if err != nil || string(s.Data["password"]) != "hunter2" || string(s.Data["user"]) != "admin" {
		t.Fatalf("creds: %+v %v", s, err)
	}
	if cm, err := f.ConfigMap(ctx, "default", "other"); err != nil || string(cm.BinaryData["b"]) != "\x00\x01" {
		t.Fatalf("list item: %+v %v", cm, err)
	}
	if _, err := f.Secret(ctx, "default", "creds"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a secret of another namespace: %v", err)
	}

	// An edit is seen at the next read.
	write(t, dir, "app.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {greeting: bonjour}\n")
	if cm, _ := f.ConfigMap(ctx, "default", "settings"); cm == nil || cm.Data["greeting"] != "bonjour" {
		t.Errorf("edit not seen: %+v", cm)
	}

	// A broken file is named when what was asked for is missing; the
	// other files still serve.
	write(t, dir, "broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {\"bad key!\": v}\n")
	write(t, dir, "dup.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n")
	_, err = f.ConfigMap(ctx, "default", "x")
	if err == nil || !strings.Contains(err.Error(), "broken.yaml") || !strings.Contains(err.Error(), `data key "bad key!"`) {
		t.Errorf("broken file not named: %v", err)
	}
	if _, err := f.ConfigMap(ctx, "default", "missing"); err == nil || !strings.Contains(err.Error(), "also defined in") {
		t.Errorf("duplicate not reported: %v", err)
	}
	if cm, err := f.ConfigMap(ctx, "default", "other"); err != nil || cm == nil {
		t.Errorf("a good file stopped serving: %v", err)
	}
}
