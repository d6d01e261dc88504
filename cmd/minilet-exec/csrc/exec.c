// The exec helper of minilet's embedded runtime in freestanding C: no C
// library, raw system calls, its own entry point. Per exec it costs about
// a tenth of a millisecond of CPU, where any Go program (the runtime's start)
// costs 1.5-4 ms and a static glibc program's start-up (CPU feature probing,
// which traps to the hypervisor in a VM) ~0.5 ms. scripts/build-exec-helper.sh
// builds it (x86-64 and arm64); elsewhere, or without a C compiler, the Go
// program of cmd/minilet-exec (monitorproc's trampoline) does the same job.
//
// It does what monitorproc's trampoline does (trampoline.go, security.go,
// execsec.go): same protocol, same steps in the same order, same error
// texts. Keep the two in step; cmd/minilet-exec's parity test compares them,
// the embedded runtime's conformance tests run through both.
//
// Protocol (monitorproc: TrampolineArg0, TrampolineEnv and friends): argv
// is "minilet-exec", the container's cgroup directories, "--", the command;
// the environment is the command's plus the MINILET_EMBEDDED_EXEC* markers
// (never passed on); a failure before the command runs is written to fd 3
// and the exit status is 127; fd 3 closes when the command starts.

#include <asm/unistd.h>
#include <linux/capability.h>
#include <linux/fcntl.h>
#include <linux/filter.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/stat.h>

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the freestanding exec helper supports x86-64 and arm64; use the Go one (cmd/minilet-exec)"
#endif

#define ENV_PREFIX "MINILET_EMBEDDED_EXEC"
#define ARG0 "minilet-exec"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define REPORT_FD 3
#define MAX_SECCOMP_INSNS 4096
#define MAX_GROUPS 256
#define SIGCHLD 17

typedef unsigned long size_t;
typedef unsigned long long u64;
typedef unsigned int u32;

// ---- entry point and system calls ----

void minilet_exec_main(long *sp) __attribute__((noreturn, used));

#if defined(__x86_64__)
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
	"	xor %rbp, %rbp\n	mov %rsp, %rdi\n	and $-16, %rsp\n	call minilet_exec_main\n	hlt\n");

static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return ret;
}
#else
__asm__(".text\n.globl _start\n.type _start,%function\n_start:\n"
	"	mov x29, #0\n	mov x30, #0\n	mov x0, sp\n	and sp, x0, #-16\n	bl minilet_exec_main\n	brk #0\n");

static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c,
			       x3 __asm__("x3") = d, x4 __asm__("x4") = e, x5 __asm__("x5") = f;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
	return x0;
}
#endif

static long sys0(long n) { return sys6(n, 0, 0, 0, 0, 0, 0); }
static long sys1(long n, long a) { return sys6(n, a, 0, 0, 0, 0, 0); }
static long sys2(long n, long a, long b) { return sys6(n, a, b, 0, 0, 0, 0); }
static long sys3(long n, long a, long b, long c) { return sys6(n, a, b, c, 0, 0, 0); }
static long sys5(long n, long a, long b, long c, long d, long e) { return sys6(n, a, b, c, d, e, 0); }

static __attribute__((noreturn)) void sys_exit(int code) {
	for (;;)
		sys1(__NR_exit_group, code);
}

// The compiler may emit calls to these for copies and zeroing.
void *memset(void *d, int c, size_t n) {
	unsigned char *p = d;
	while (n--)
		*p++ = (unsigned char)c;
	return d;
}

void *memcpy(void *d, const void *s, size_t n) {
	unsigned char *p = d;
	const unsigned char *q = s;
	while (n--)
		*p++ = *q++;
	return d;
}

// ---- strings ----

static size_t slen(const char *s) {
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static int seq(const char *a, const char *b) {
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

static int prefix(const char *s, const char *p) {
	while (*p)
		if (*s++ != *p++)
			return 0;
	return 1;
}

static const char *env_get(char **envp, const char *name) {
	size_t n = slen(name);
	for (char **e = envp; *e; e++)
		if (prefix(*e, name) && (*e)[n] == '=')
			return *e + n + 1;
	return 0;
}

// A small text builder for paths and error messages.
struct text {
	char b[4096];
	size_t n;
};

static void put(struct text *t, const char *s) {
	while (*s && t->n < sizeof t->b - 1)
		t->b[t->n++] = *s++;
	t->b[t->n] = 0;
}

static void putn(struct text *t, const char *s, size_t n) {
	while (n-- && *s && t->n < sizeof t->b - 1)
		t->b[t->n++] = *s++;
	t->b[t->n] = 0;
}

static void put_dec(struct text *t, u64 v) {
	char d[24];
	int i = 0;
	do
		d[i++] = '0' + v % 10;
	while (v /= 10);
	while (i && t->n < sizeof t->b - 1)
		t->b[t->n++] = d[--i];
	t->b[t->n] = 0;
}

static void put_hex16(struct text *t, u64 v) {
	for (int i = 15; i >= 0; i--) {
		char c = "0123456789abcdef"[(v >> (4 * i)) & 15];
		if (t->n < sizeof t->b - 1)
			t->b[t->n++] = c;
	}
	t->b[t->n] = 0;
}

// put_err appends errno e's text as Go spells it.
static void put_err(struct text *t, long e) {
	static const struct {
		int no;
		const char *text;
	} texts[] = {
		{1, "operation not permitted"}, {2, "no such file or directory"}, {3, "no such process"},
		{4, "interrupted system call"}, {5, "input/output error"}, {7, "argument list too long"},
		{8, "exec format error"}, {9, "bad file descriptor"}, {10, "no child processes"},
		{11, "resource temporarily unavailable"}, {12, "cannot allocate memory"}, {13, "permission denied"},
		{14, "bad address"}, {16, "device or resource busy"}, {17, "file exists"}, {20, "not a directory"},
		{21, "is a directory"}, {22, "invalid argument"}, {24, "too many open files"},
		{26, "text file busy"}, {28, "no space left on device"}, {30, "read-only file system"},
		{36, "file name too long"}, {38, "function not implemented"}, {40, "too many levels of symbolic links"},
	};
	if (e < 0)
		e = -e;
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
		if (texts[i].no == e) {
			put(t, texts[i].text);
			return;
		}
	put(t, "errno ");
	put_dec(t, e);
}

// fail reports t on fd 3 and exits 127.
static __attribute__((noreturn)) void fail(const struct text *t) {
	for (size_t off = 0; off < t->n;) {
		long w = sys3(__NR_write, REPORT_FD, (long)(t->b + off), t->n - off);
		if (w <= 0)
			break;
		off += w;
	}
	sys_exit(127);
}

static __attribute__((noreturn)) void fail1(const char *msg) {
	struct text t = {.n = 0};
	put(&t, msg);
	fail(&t);
}

// failerr reports "a" + errno text.
static __attribute__((noreturn)) void failerr(const char *a, long e) {
	struct text t = {.n = 0};
	put(&t, a);
	put_err(&t, e);
	fail(&t);
}

// ---- files ----

static long open_ro(const char *path) { return sys6(__NR_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0, 0); }

// read_small reads a small (proc) file whole, NUL-terminated; <0 is -errno.
static long read_small(const char *path, char *buf, size_t size) {
	long fd = open_ro(path);
	if (fd < 0)
		return fd;
	size_t len = 0;
	for (;;) {
		long r = sys3(__NR_read, fd, (long)(buf + len), size - 1 - len);
		if (r == -4)
			continue;
		if (r < 0) {
			sys1(__NR_close, fd);
			return r;
		}
		len += r;
		if (r == 0 || len >= size - 1)
			break;
	}
	sys1(__NR_close, fd);
	buf[len] = 0;
	return 0;
}

// file_mode stats path; <0 is -errno.
static long file_mode(const char *path, unsigned *mode) {
	static struct statx stx;
	long r = sys5(__NR_statx, AT_FDCWD, (long)path, 0, STATX_TYPE | STATX_MODE, (long)&stx);
	if (r == 0)
		*mode = stx.stx_mode;
	return r;
}

// ---- /proc/PID/status ----

// status_field is the value of "key:" in a /proc/PID/status text, or 0.
static const char *status_field(const char *status, const char *key) {
	size_t n = slen(key);
	for (const char *l = status; *l;) {
		if (prefix(l, key) && l[n] == ':')
			return l + n + 1;
		while (*l && *l != '\n')
			l++;
		if (*l)
			l++;
	}
	return 0;
}

static const char *skip_space(const char *v) {
	while (*v == ' ' || *v == '\t')
		v++;
	return v;
}

static u64 parse_dec(const char **p) {
	u64 v = 0;
	while (**p >= '0' && **p <= '9')
		v = v * 10 + (u64)(*(*p)++ - '0');
	return v;
}

static int hexval(char c) {
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static char status_buf[16384];

static void status_path(struct text *t, const char *pid) {
	put(t, "/proc/");
	put(t, pid);
	put(t, "/status");
}

// bounding_set reads CapBnd of pid ("self", "thread-self" or a number); on
// failure it fills err and returns -1.
static int bounding_set(const char *pid, u64 *out, struct text *err) {
	struct text path = {.n = 0};
	status_path(&path, pid);
	long r = read_small(path.b, status_buf, sizeof status_buf);
	if (r < 0) {
		put(err, "open ");
		put(err, path.b);
		put(err, ": ");
		put_err(err, r);
		return -1;
	}
	const char *v = status_field(status_buf, "CapBnd");
	if (!v) {
		put(err, "no CapBnd in /proc/");
		put(err, pid);
		put(err, "/status");
		return -1;
	}
	u64 caps = 0;
	for (v = skip_space(v); hexval(*v) >= 0; v++)
		caps = caps << 4 | (u64)hexval(*v);
	*out = caps;
	return 0;
}

struct credential {
	u32 uid, gid;
	u32 groups[MAX_GROUPS];
	int ngroups;
};

// proc_credential is the user, group and supplementary groups pid runs as.
static void proc_credential(const char *pid, struct credential *c) {
	struct text path = {.n = 0};
	status_path(&path, pid);
	long r = read_small(path.b, status_buf, sizeof status_buf);
	if (r < 0) {
		struct text t = {.n = 0};
		put(&t, "container is gone: open ");
		put(&t, path.b);
		put(&t, ": ");
		put_err(&t, r);
		fail(&t);
	}
	c->uid = c->gid = 0;
	c->ngroups = 0;
	const char *v;
	if ((v = status_field(status_buf, "Uid"))) {
		v = skip_space(v);
		c->uid = (u32)parse_dec(&v);
	}
	if ((v = status_field(status_buf, "Gid"))) {
		v = skip_space(v);
		c->gid = (u32)parse_dec(&v);
	}
	if ((v = status_field(status_buf, "Groups"))) {
		for (;;) {
			v = skip_space(v);
			if (*v < '0' || *v > '9' || c->ngroups == MAX_GROUPS)
				break;
			c->groups[c->ngroups++] = (u32)parse_dec(&v);
		}
	}
}

// ---- capabilities, namespaces, confinement ----

static unsigned last_cap(void) {
	char buf[32];
	if (read_small("/proc/sys/kernel/cap_last_cap", buf, sizeof buf) == 0) {
		const char *p = buf;
		u64 n = parse_dec(&p);
		if (p != buf && n < 64)
			return (unsigned)n;
	}
	return 40;
}

// limit_bounding_set drops every capability not in mask from the bounding
// set.
static void limit_bounding_set(u64 mask) {
	unsigned last = last_cap();
	for (unsigned c = 0; c <= last; c++) {
		if (mask & (1ULL << c))
			continue;
		long r = sys2(__NR_prctl, PR_CAPBSET_DROP, c);
		if (r < 0) {
			struct text t = {.n = 0};
			put(&t, "drop capability ");
			put_dec(&t, c);
			put(&t, ": ");
			put_err(&t, r);
			fail(&t);
		}
	}
}

static int same_namespace(const char *a, const char *b) {
	char x[128], y[128];
	long n = sys6(__NR_readlinkat, AT_FDCWD, (long)a, (long)x, sizeof x - 1, 0, 0);
	long m = sys6(__NR_readlinkat, AT_FDCWD, (long)b, (long)y, sizeof y - 1, 0, 0);
	if (n < 0 || m < 0)
		return 0;
	x[n] = 0;
	y[m] = 0;
	return seq(x, y);
}

// setns_path enters the namespace at path; on failure it fills err and
// returns -1.
static int setns_path(const char *path, int flag, struct text *err) {
	long fd = open_ro(path);
	if (fd < 0) {
		put(err, "open ");
		put(err, path);
		put(err, ": ");
		put_err(err, fd);
		return -1;
	}
	long r = sys2(__NR_setns, fd, flag);
	sys1(__NR_close, fd);
	if (r < 0) {
		put_err(err, r);
		return -1;
	}
	return 0;
}

static void ns_path(struct text *t, const char *pid, const char *kind) {
	put(t, "/proc/");
	put(t, pid);
	put(t, "/ns/");
	put(t, kind);
}

// join_namespaces_of enters pid's network, UTS and IPC namespaces where
// they differ from ours.
static void join_namespaces_of(const char *pid) {
	static const struct {
		const char *kind;
		int flag;
	} kinds[] = {{"net", CLONE_NEWNET}, {"uts", CLONE_NEWUTS}, {"ipc", CLONE_NEWIPC}};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		struct text theirs = {.n = 0}, ours = {.n = 0};
		ns_path(&theirs, pid, kinds[i].kind);
		ns_path(&ours, "thread-self", kinds[i].kind);
		if (same_namespace(theirs.b, ours.b))
			continue;
		struct text t = {.n = 0};
		put(&t, "enter the container's ");
		put(&t, kinds[i].kind);
		put(&t, " namespace: ");
		if (setns_path(theirs.b, kinds[i].flag, &t) < 0)
			fail(&t);
	}
}

static void change_dir(const char *dir, int with_op) {
	long r = sys1(__NR_chdir, (long)dir);
	if (r < 0) {
		struct text t = {.n = 0};
		put(&t, "working directory ");
		put(&t, dir);
		put(&t, ": ");
		if (with_op) { // Go's os.Chdir names the operation
			put(&t, "chdir ");
			put(&t, dir);
			put(&t, ": ");
		}
		put_err(&t, r);
		fail(&t);
	}
}

// enter_mount_namespace enters the network, UTS, IPC and mount namespaces
// of a host-image container's process pid, and dir there.
static void enter_mount_namespace(const char *pid, const char *dir) {
	join_namespaces_of(pid);
	struct text path = {.n = 0};
	ns_path(&path, pid, "mnt");
	long fd = open_ro(path.b);
	if (fd < 0) {
		struct text t = {.n = 0};
		put(&t, "container is gone: open ");
		put(&t, path.b);
		put(&t, ": ");
		put_err(&t, fd);
		fail(&t);
	}
	long r = sys1(__NR_unshare, CLONE_FS);
	if (r < 0)
		failerr("unshare filesystem attributes: ", r);
	if ((r = sys2(__NR_setns, fd, CLONE_NEWNS)) < 0)
		failerr("enter mount namespace: ", r);
	sys1(__NR_close, fd);
	change_dir(dir && *dir ? dir : "/", 0);
}

// look_path resolves name through the PATH of env, as the container would.
static const char *look_path(const char *name, char **envp) {
	unsigned mode;
	for (const char *p = name; *p; p++)
		if (*p == '/') {
			long r = file_mode(name, &mode);
			if (r < 0) {
				struct text t = {.n = 0};
				put(&t, "executable \"");
				put(&t, name);
				put(&t, "\" not found: stat ");
				put(&t, name);
				put(&t, ": ");
				put_err(&t, r);
				fail(&t);
			}
			return name;
		}
	const char *path = env_get(envp, "PATH");
	if (!path)
		path = DEFAULT_PATH;
	static struct text full;
	// An empty PATH has no entries (Go's filepath.SplitList).
	for (const char *p = path; *path;) {
		const char *end = p;
		while (*end && *end != ':')
			end++;
		full.n = 0;
		full.b[0] = 0;
		if (end > p) {
			putn(&full, p, end - p);
			put(&full, "/");
		}
		put(&full, name);
		if (file_mode(full.b, &mode) == 0 && (mode & S_IFMT) != S_IFDIR && (mode & 0111))
			return full.b;
		if (!*end)
			break;
		p = end + 1;
	}
	struct text t = {.n = 0};
	put(&t, "executable \"");
	put(&t, name);
	put(&t, "\" not found in $PATH");
	fail(&t);
}

struct security {
	u64 caps;
	int privileged, no_new_privs;
	unsigned short filter_len;
};

static struct sock_filter filter[MAX_SECCOMP_INSNS];

// parse_security reads the marker monitorproc.EncodeExecSecurity wrote:
// CAPS:FLAGS:SECCOMP.
static void parse_security(const char *v, struct security *sec) {
	sec->caps = 0;
	sec->privileged = sec->no_new_privs = 0;
	sec->filter_len = 0;
	const char *c1 = v;
	while (*c1 && *c1 != ':')
		c1++;
	const char *c2 = *c1 ? c1 + 1 : c1;
	while (*c2 && *c2 != ':')
		c2++;
	const char *hex = *c2 ? c2 + 1 : c2;
	for (const char *p = hex; *p; p++)
		if (*p == ':')
			hex = 0;
	if (!*c1 || !*c2 || c1 - v != 16 || !hex)
		fail1("container's security context: malformed " ENV_PREFIX "_SEC");
	for (const char *p = v; p < c1; p++) {
		int h = hexval(*p);
		if (h < 0)
			fail1("container's security context: capabilities: malformed");
		sec->caps = sec->caps << 4 | (u64)h;
	}
	for (const char *p = c1 + 1; p < c2; p++) {
		if (*p == 'p')
			sec->privileged = 1;
		else if (*p == 'n')
			sec->no_new_privs = 1;
	}
	size_t hexlen = slen(hex);
	if (hexlen == 0)
		return;
	if (hexlen % 2)
		fail1("container's security context: seccomp filter: encoding/hex: odd length hex string");
	size_t bytes = hexlen / 2;
	if (bytes % sizeof(struct sock_filter) || bytes / sizeof(struct sock_filter) > MAX_SECCOMP_INSNS) {
		struct text t = {.n = 0};
		put(&t, "seccomp filter of ");
		put_dec(&t, bytes);
		put(&t, " bytes is malformed");
		fail(&t);
	}
	unsigned char *raw = (unsigned char *)filter;
	for (size_t i = 0; i < bytes; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			fail1("container's security context: seccomp filter: malformed");
		raw[i] = (unsigned char)(hi << 4 | lo);
	}
	// struct sock_filter is {u16 code; u8 jt, jf; u32 k} in native byte
	// order, exactly the encoding of Security.Seccomp.
	sec->filter_len = (unsigned short)(bytes / sizeof(struct sock_filter));
}

static void install_seccomp(const struct security *sec) {
	struct sock_fprog prog = {.len = sec->filter_len, .filter = filter};
	long r = sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&prog);
	if (r < 0)
		failerr("install seccomp filter: ", r);
}

static void set_credential(const struct credential *c) {
	long r = sys2(__NR_setgroups, c->ngroups, (long)c->groups);
	if (r < 0)
		failerr("setgroups: ", r);
	if ((r = sys1(__NR_setgid, c->gid)) < 0) {
		struct text t = {.n = 0};
		put(&t, "setgid ");
		put_dec(&t, c->gid);
		put(&t, ": ");
		put_err(&t, r);
		fail(&t);
	}
	if ((r = sys1(__NR_setuid, c->uid)) < 0) {
		struct text t = {.n = 0};
		put(&t, "setuid ");
		put_dec(&t, c->uid);
		put(&t, ": ");
		put_err(&t, r);
		fail(&t);
	}
}

// set_capabilities sets the permitted and effective sets to caps (within
// the bounding set) and empties the inheritable and ambient ones.
static void set_capabilities(u64 caps) {
	u64 bnd;
	struct text err = {.n = 0};
	if (bounding_set("thread-self", &bnd, &err) == 0)
		caps &= bnd;
	long r = sys2(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL);
	if (r < 0 && r != -22)
		failerr("clear ambient capabilities: ", r);
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[2];
	for (int i = 0; i < 2; i++) {
		data[i].permitted = (u32)(caps >> (32 * i));
		data[i].effective = data[i].permitted;
		data[i].inheritable = 0;
	}
	if ((r = sys2(__NR_capset, (long)&hdr, (long)data)) < 0) {
		struct text t = {.n = 0};
		put(&t, "set capabilities ");
		put_hex16(&t, caps);
		put(&t, ": ");
		put_err(&t, r);
		fail(&t);
	}
}

static void set_no_new_privs(void) {
	long r = sys2(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1);
	if (r < 0)
		failerr("set no_new_privs: ", r);
}

// drop_privileges confines the calling process as dropPrivileges does in
// Go: seccomp early without no_new_privs, bounding set, user and groups,
// capabilities, then no_new_privs and seccomp.
static void drop_privileges(const struct security *sec, const struct credential *cred) {
	if (sec->filter_len && !sec->no_new_privs)
		install_seccomp(sec);
	u64 caps = sec->caps;
	if (sec->privileged) {
		struct text err = {.n = 0};
		if (bounding_set("self", &caps, &err) < 0)
			fail(&err);
	} else {
		limit_bounding_set(caps);
	}
	if (cred->uid != 0) {
		long r = sys2(__NR_prctl, PR_SET_KEEPCAPS, 1);
		if (r < 0)
			failerr("keep capabilities: ", r);
	}
	set_credential(cred);
	set_capabilities(caps);
	if (sec->no_new_privs) {
		set_no_new_privs();
		if (sec->filter_len)
			install_seccomp(sec);
	}
}

static __attribute__((noreturn)) void exec_failed(const char *path, long r, int fork_exec) {
	struct text t = {.n = 0};
	if (fork_exec) { // as Go's exec.Cmd.Start reports it
		put(&t, "fork/exec ");
		put(&t, path);
		put(&t, ": ");
	}
	put_err(&t, r);
	fail(&t);
}

// exec_in_container runs argv in the container from an image whose init is
// pid (its namespaces, PID namespace included, and its root, as its user)
// and exits with its status.
static __attribute__((noreturn)) void exec_in_container(const char *pid, const char *dir, char **argv, char **envp,
							const struct security *sec) {
	static struct credential cred;
	proc_credential(pid, &cred);
	u64 bnd;
	struct text err = {.n = 0};
	put(&err, "container is gone: ");
	if (bounding_set(pid, &bnd, &err) < 0)
		fail(&err);
	limit_bounding_set(bnd);
	join_namespaces_of(pid);
	struct text theirs = {.n = 0};
	ns_path(&theirs, pid, "pid");
	if (!same_namespace(theirs.b, "/proc/thread-self/ns/pid")) {
		struct text t = {.n = 0};
		put(&t, "enter the container's pid namespace: ");
		if (setns_path(theirs.b, CLONE_NEWPID, &t) < 0)
			fail(&t);
	}
	struct text root = {.n = 0};
	put(&root, "/proc/");
	put(&root, pid);
	put(&root, "/root");
	long r = sys1(__NR_chroot, (long)root.b);
	if (r < 0)
		failerr("enter container root: ", r);
	change_dir(dir && *dir ? dir : "/", 1);
	const char *path = look_path(argv[0], envp);
	if (sec && sec->no_new_privs)
		set_no_new_privs();
	if (sec && sec->filter_len)
		install_seccomp(sec);
	long child = sys5(__NR_clone, SIGCHLD, 0, 0, 0, 0);
	if (child < 0)
		exec_failed(path, child, 1);
	if (child == 0) {
		// The child reports its own failure on fd 3 (exit status 127,
		// which the helper passes on); fd 3 closes when the exec works.
		set_credential(&cred);
		r = sys3(__NR_execve, (long)path, (long)argv, (long)envp);
		exec_failed(path, r, 1);
	}
	// Set-up is over once the child execs: its copy of fd 3 is the last.
	sys1(__NR_close, REPORT_FD);
	int status = 0;
	while ((r = sys6(__NR_wait4, child, (long)&status, 0, 0, 0, 0)) < 0)
		if (r != -4)
			sys_exit(127);
	if ((status & 0x7f) != 0 && (status & 0x7f) != 0x7f)
		sys_exit(128 + (status & 0x7f)); // killed by a signal
	sys_exit((status >> 8) & 0xff);
}

static void not_for_hands(void) {
	static const char msg[] = "minilet-exec: this program is started by the minilet agent for each exec into a container; it is not run by hand\n";
	sys3(__NR_write, 2, (long)msg, sizeof msg - 1);
	sys_exit(2);
}

void minilet_exec_main(long *sp) {
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1), **envp = argv + argc + 1;
	const char *marker = env_get(envp, ENV_PREFIX);
	if (argc < 1 || !seq(argv[0], ARG0) || !marker || !*marker)
		not_for_hands();
	sys3(__NR_fcntl, REPORT_FD, F_SETFD, FD_CLOEXEC);
	int sep = -1;
	for (int i = 1; i < argc; i++)
		if (seq(argv[i], "--")) {
			sep = i;
			break;
		}
	if (sep < 0 || sep == argc - 1)
		fail1("trampoline: no command");
	struct text pid = {.n = 0};
	put_dec(&pid, (u64)sys0(__NR_getpid));
	for (int i = 1; i < sep; i++) {
		struct text path = {.n = 0}, t = {.n = 0};
		put(&path, argv[i]);
		put(&path, "/cgroup.procs");
		put(&t, "join cgroup ");
		put(&t, argv[i]);
		put(&t, ": ");
		long fd = sys6(__NR_openat, AT_FDCWD, (long)path.b, O_WRONLY | O_CLOEXEC, 0, 0, 0);
		if (fd < 0) {
			put(&t, "open ");
			put(&t, path.b);
			put(&t, ": ");
			put_err(&t, fd);
			fail(&t);
		}
		long w = sys3(__NR_write, fd, (long)pid.b, pid.n);
		if (w != (long)pid.n) {
			put(&t, "write ");
			put(&t, path.b);
			put(&t, ": ");
			put_err(&t, w < 0 ? w : 5);
			fail(&t);
		}
		sys1(__NR_close, fd);
	}
	const char *pid_env = env_get(envp, ENV_PREFIX "_PID");
	const char *mnt_env = env_get(envp, ENV_PREFIX "_MNT");
	const char *dir_env = env_get(envp, ENV_PREFIX "_DIR");
	const char *sec_env = env_get(envp, ENV_PREFIX "_SEC");
	static struct security secbuf;
	struct security *sec = 0;
	if (sec_env && *sec_env) {
		parse_security(sec_env, &secbuf);
		sec = &secbuf;
	}
	// The command's environment: ours without the markers (in place).
	int n = 0;
	for (char **e = envp; *e; e++)
		if (!prefix(*e, ENV_PREFIX))
			envp[n++] = *e;
	envp[n] = 0;
	char **cmd = argv + sep + 1;
	if (pid_env && *pid_env)
		exec_in_container(pid_env, dir_env, cmd, envp, sec);
	static struct credential cred;
	int have_cred = 0;
	if (mnt_env && *mnt_env) {
		enter_mount_namespace(mnt_env, dir_env);
		if (sec) {
			proc_credential(mnt_env, &cred);
			have_cred = 1;
		}
	}
	const char *path = look_path(cmd[0], envp);
	if (have_cred)
		drop_privileges(sec, &cred);
	long r = sys3(__NR_execve, (long)path, (long)cmd, (long)envp);
	exec_failed(path, r, 0);
}
