package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/server"
)

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0B", 1023: "1023B", 1024: "1.0Ki", 1536: "1.5Ki",
		5 * 1024 * 1024: "5.0Mi", 300 * 1024 * 1024: "300Mi", 3 << 30: "3.0Gi",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPrintImages(t *testing.T) {
	imgs := []server.Image{
		{ID: "sha256:0123456789abcdef0123", RepoTags: []string{"busybox:1.36"}, Size: 4 << 20, LastUsed: now.Add(-5 * time.Minute), Pinned: true},
		{ID: "sha256:fedcba9876543210", Size: 512},
	}
	var out, errOut bytes.Buffer
	if err := printImages(&out, &errOut, imgs, now); err != nil {
		t.Fatal(err)
	}
	want := `IMAGE ID SIZE LAST USED PINNED
busybox:1.36 0123456789ab 4.0Mi 5m ago true
<none> fedcba987654 512B never false`
	if got := table(out.String()); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	out.Reset()
	if err := printImages(&out, &errOut, nil, now); err != nil || out.Len() != 0 || errOut.String() != "No images found.\n" {
		t.Errorf("empty list: out %q err %q %v", out.String(), errOut.String(), err)
	}
}
