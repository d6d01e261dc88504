package imagereg

// An Image is one image the registry serves.
type Image struct {
	// ID is the image's ImageID in k8s.io/kubernetes/test/utils/image
	// (manifest.go): "Agnhost", "BusyBox", ...
	ID string
	// Key is the registry key of the repo list its repository hangs from.
	Key string
	// Name and Tag are as manifest.go gives them ("agnhost", "2.66.1").
	Name, Tag string
	// Ref is the full reference on the registry, equal to what e2e.test
	// computes with the repo list: "127.0.0.1:PORT/e2e-test-images/agnhost:2.66.1".
	Ref string
	// Contents says what the image holds.
	Contents string

	kind imageKind
}

type imageKind int

const (
	kindAgnhost imageKind = iota
	kindBusybox
	kindNginx
	kindNonRoot
	kindNonewprivs
	kindPause
)

// catalog is every image of manifest.go (v1.37.2) a [NodeConformance] spec
// of e2e.test uses, plus the other tags of the same images:
//
//   - Agnhost, BusyBox, Pause: most specs (test/e2e/common/node, storage,
//     network; e2epod helpers).
//   - AgnhostPrev: "should run through the lifecycle of Pods and PodStatus"
//     (Conformance, not NodeConformance; same content, so cheap).
//   - AgnhostPrivate: the private registry's agnhost, behind basic auth.
//   - Nginx: "Pods should have their auto-restart back-off timer reset on
//     image update" changes busybox for it and runs `/bin/sh -c sleep 5` in
//     it; NginxNew: the same stand-in under the newer tag.
//   - NonRoot, Nonewprivs: "Security Context" runAsNonRoot and
//     allowPrivilegeEscalation specs.
//   - GlibcDnsTesting: "Override hostname of Pod" runs
//     `sh -c 'echo $(hostname);$(hostname -f);'` in it.
//
// InvalidRegistryImage (invalidRegistry alpine:3.1) is deliberately absent:
// its pull must fail.
var catalog = []Image{
	{ID: "Agnhost", Key: "promoterE2eRegistry", Name: "agnhost", Tag: "2.66.1", kind: kindAgnhost},
	{ID: "AgnhostPrev", Key: "promoterE2eRegistry", Name: "agnhost", Tag: "2.55", kind: kindAgnhost},
	{ID: "AgnhostPrivate", Key: "privateRegistry", Name: "agnhost", Tag: "2.6", kind: kindAgnhost},
	{ID: "BusyBox", Key: "promoterE2eRegistry", Name: "busybox", Tag: "1.37.0-2", kind: kindBusybox},
	{ID: "GlibcDnsTesting", Key: "promoterE2eRegistry", Name: "glibc-dns-testing", Tag: "2.1.1", kind: kindBusybox},
	{ID: "Nginx", Key: "promoterE2eRegistry", Name: "nginx", Tag: "1.27.0-2", kind: kindNginx},
	{ID: "NginxNew", Key: "promoterE2eRegistry", Name: "nginx", Tag: "1.28.0-2", kind: kindNginx},
	{ID: "NonRoot", Key: "promoterE2eRegistry", Name: "nonroot", Tag: "1.5", kind: kindNonRoot},
	{ID: "Nonewprivs", Key: "promoterE2eRegistry", Name: "nonewprivs", Tag: "1.4", kind: kindNonewprivs},
	{ID: "Pause", Key: "gcRegistry", Name: "pause", Tag: "3.10.2", kind: kindPause},
}

// contents describes each kind of image for Image.Contents.
var contents = map[imageKind]string{
	kindAgnhost: "busybox base + static /agnhost (entrypoint /agnhost, cmd pause), /agnhost-2 link, /uploads, " +
		"user-defined-in-image (1000) in group-defined-in-image (50000), and fake-registry-server's " +
		"/var/registry/pause (tag testing = the pause image)",
	kindBusybox:    "Debian's static busybox at /bin/busybox with a link per applet, /etc/passwd and /etc/group, /tmp (cmd sh)",
	kindNginx:      "busybox base + /usr/share/nginx/html/index.html served by busybox httpd on port 80 (a stand-in: no nginx binary)",
	kindNonRoot:    "busybox base, user 1234",
	kindNonewprivs: "busybox base + /usr/local/bin/nnp, set-user-ID root, printing \"Effective uid: N\" (cmd nnp)",
	kindPause:      "static /pause that waits for SIGTERM/SIGINT and reaps children (entrypoint /pause, user 65535:65535)",
}
