package imagereg

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// hostBusybox is Debian's static busybox (package busybox-static).
const hostBusybox = "/bin/busybox"

// The accounts of the upstream busybox image.
const (
	basePasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`
	baseGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
`
)

// busyboxTree is the base every shell image is made of, as the upstream
// busybox image: the static busybox at /bin/busybox with a symbolic link
// for each of its applets in /bin (/bin/sh, /bin/ls, /bin/wget,
// /bin/sysctl, ...), the accounts above, and a world-writable /tmp.
func busyboxTree(ctx context.Context) (*tree, error) {
	if _, err := os.Stat(hostBusybox); err != nil {
		return nil, fmt.Errorf("busybox image: %s is missing (apt-get install -y busybox-static): %w", hostBusybox, err)
	}
	out, err := exec.CommandContext(ctx, hostBusybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox image: %s --list-full: %w", hostBusybox, err)
	}
	t := newTree()
	t.hostFile("/bin/busybox", 0o755, hostBusybox)
	n := 0
	for _, applet := range strings.Fields(string(out)) {
		// Every applet in /bin, as the upstream image has them (specs run
		// /bin/sysctl, which Debian's busybox places in /sbin).
		p := "/bin/" + filepath.Base(applet)
		if p == "/bin/busybox" {
			continue
		}
		t.symlink(p, "/bin/busybox")
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("busybox image: %s --list-full listed no applets", hostBusybox)
	}
	for _, d := range []string{"/root", "/home", "/var/www", "/var/spool/mail", "/usr/sbin", "/sbin"} {
		t.dir(d, 0o755)
	}
	t.dir("/root", 0o700)
	t.dir("/tmp", 0o1777)
	t.file("/etc/passwd", 0o644, []byte(basePasswd))
	t.file("/etc/group", 0o644, []byte(baseGroup))
	return t, nil
}

// withAccounts returns the base accounts followed by extra lines.
func withAccounts(base string, extra ...string) []byte {
	var b bytes.Buffer
	b.WriteString(base)
	for _, l := range extra {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}
