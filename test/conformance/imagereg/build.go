package imagereg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var defaultEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// nginxIndex is the stand-in nginx's default page.
const nginxIndex = `<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body><h1>Welcome to nginx!</h1></body>
</html>
`

// buildImages builds one image of each kind; the busybox layer is shared.
func buildImages(ctx context.Context, dir string, bins Binaries) (map[imageKind]v1.Image, error) {
	bb, err := busyboxTree(ctx)
	if err != nil {
		return nil, err
	}
	pauseBin, err := buildProg(ctx, dir, "pause")
	if err != nil {
		return nil, err
	}
	nnpBin, err := buildProg(ctx, dir, "nnp")
	if err != nil {
		return nil, err
	}
	out := map[imageKind]v1.Image{}
	add := func(kind imageKind, what string, cfg v1.Config, layers ...*tree) error {
		img, err := image(dir, cfg, what, layers...)
		if err != nil {
			return fmt.Errorf("build the %s image: %w", what, err)
		}
		out[kind] = img
		return nil
	}

	// pause, as registry.k8s.io/pause: one static program, run as 65535.
	pause := newTree()
	pause.hostFile("/pause", 0o755, pauseBin)
	if err := add(kindPause, "pause", v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", WorkingDir: "/"}, pause); err != nil {
		return nil, err
	}

	if err := add(kindBusybox, "busybox", v1.Config{Env: defaultEnv, Cmd: []string{"sh"}}, bb); err != nil {
		return nil, err
	}
	if err := add(kindNonRoot, "nonroot", v1.Config{Env: defaultEnv, Cmd: []string{"sh"}, User: "1234"}, bb); err != nil {
		return nil, err
	}

	nnp := newTree()
	nnp.hostFile("/usr/local/bin/nnp", 0o4755, nnpBin)
	if err := add(kindNonewprivs, "nonewprivs", v1.Config{Env: defaultEnv, Cmd: []string{"nnp"}}, bb, nnp); err != nil {
		return nil, err
	}

	nginx := newTree()
	nginx.file("/usr/share/nginx/html/index.html", 0o644, []byte(nginxIndex))
	if err := add(kindNginx, "nginx stand-in", v1.Config{
		Env:          defaultEnv,
		Cmd:          []string{"httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"},
		ExposedPorts: map[string]struct{}{"80/tcp": {}},
	}, bb, nginx); err != nil {
		return nil, err
	}

	agn, err := agnhostTree(bins.Agnhost, out[kindPause])
	if err != nil {
		return nil, err
	}
	if err := add(kindAgnhost, "agnhost", v1.Config{
		Env:        defaultEnv,
		Entrypoint: []string{"/agnhost"},
		Cmd:        []string{"pause"},
		WorkingDir: "/",
		ExposedPorts: map[string]struct{}{
			"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {},
		},
	}, bb, agn); err != nil {
		return nil, err
	}
	return out, nil
}

// agnhostTree is what upstream's agnhost Dockerfile adds to its base:
// /agnhost and the /agnhost-2 link (entrypoint-tester specs), /uploads
// (netexec), a certificate for localhost at /localhost.crt and
// /localhost.key (TLS servers of the hook and probe specs), the
// image-defined user and group of the SupplementalGroups specs, and
// fake-registry-server's images (the pause image as pause:testing), and
// curl and bash (the lifecycle hook specs' exec hooks call curl, the
// sidecar probe specs run /bin/bash) and an nc with UDP, the host's own
// with their shared libraries. Not included: alpine's other extra tools (dig, iperf, socat,
// coredns).
func agnhostTree(agnhost string, pause v1.Image) (*tree, error) {
	t := newTree()
	t.hostFile("/agnhost", 0o755, agnhost)
	t.symlink("/agnhost-2", "agnhost")
	t.dir("/uploads", 0o755)
	crt, key, err := localhostCert()
	if err != nil {
		return nil, err
	}
	t.file("/localhost.crt", 0o644, crt)
	t.file("/localhost.key", 0o644, key)
	t.file("/etc/passwd", 0o644, withAccounts(basePasswd,
		"user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh"))
	t.file("/etc/group", 0o644, withAccounts(baseGroup,
		"user-defined-in-image:x:1000:",
		"group-defined-in-image:x:50000:user-defined-in-image"))
	t.ownedDir("/home/user-defined-in-image", 0o755, 1000, 1000)
	if err := addFakeRegistry(t, pause); err != nil {
		return nil, err
	}
	for _, prog := range []string{"/usr/bin/curl", "/bin/bash"} {
		if err := addHostProgram(t, prog, prog); err != nil {
			return nil, err
		}
	}
	// Debian's busybox nc has no -u, which the UDP networking specs use;
	// alpine's (upstream's base) has. OpenBSD's nc, when the host has it
	// (make conformance installs netcat-openbsd), goes first in PATH; and
	// since Debian's busybox ash runs its own applet for a name it knows
	// whatever PATH says, the image's /bin/sh is bash, which follows PATH.
	if _, err := os.Stat(hostOpenBSDNc); err == nil {
		if err := addHostProgram(t, hostOpenBSDNc, "/usr/bin/nc"); err != nil {
			return nil, err
		}
		t.symlink("/bin/sh", "bash")
	}
	return t, nil
}

// hostOpenBSDNc is Debian's netcat-openbsd.
const hostOpenBSDNc = "/bin/nc.openbsd"

// addHostProgram puts the host's dynamically linked program prog into t
// at path, with the shared libraries and loader ldd names for it.
func addHostProgram(t *tree, prog, path string) error {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		return fmt.Errorf("%s (install it on the host: the images need it): ldd: %w", prog, err)
	}
	t.hostFile(path, 0o755, prog)
	for _, line := range strings.Split(string(out), "\n") {
		// "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				t.hostFile(f, 0o755, f)
				break
			}
		}
	}
	return nil
}
