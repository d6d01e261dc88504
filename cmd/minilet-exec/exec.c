// The exec helper in C: run from an ELF constructor, before the Go runtime
// starts (which alone costs more CPU than the whole exec should), it does
// what monitorproc's trampoline does (trampoline.go, security.go) and
// replaces itself with the command, so the Go part of this program never
// runs in this role. Keep the two in step: same protocol (argv, environment,
// fd 3), same steps in the same order, same error texts.
//
// Protocol (see monitorproc: TrampolineArg0, TrampolineEnv and friends):
// argv is "minilet-exec", the container's cgroup directories, "--", the
// command; the environment is the command's plus the MINILET_EMBEDDED_EXEC*
// markers (never passed on); a failure before the command runs is written
// to fd 3 and the exit status is 127; fd 3 closes when the command starts.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ENV_PREFIX "MINILET_EMBEDDED_EXEC"
#define ARG0 "minilet-exec"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define REPORT_FD 3
#define MAX_SECCOMP_INSNS 4096

struct security {
	uint64_t caps;
	int privileged, no_new_privs;
	struct sock_filter *filter;
	unsigned short filter_len;
};

struct credential {
	uid_t uid;
	gid_t gid;
	gid_t groups[256];
	int ngroups;
};

// errtext is errno's text as Go prints it (lower-case first letter).
static const char *errtext(int e) {
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] += 'a' - 'A';
	return buf;
}

// fail reports the failure on fd 3 and exits 127.
static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 1)
		n = sizeof buf - 1;
	for (int off = 0; off < n;) {
		ssize_t w = write(REPORT_FD, buf + off, n - off);
		if (w <= 0)
			break;
		off += w;
	}
	_exit(127);
}

static char *env_get(char **envp, const char *name) {
	size_t n = strlen(name);
	for (char **e = envp; *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

// read_small reads a small (proc) file whole, NUL-terminated; -1 and errno
// on failure.
static int read_small(const char *path, char *buf, size_t size) {
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, size - 1 - len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		if (r == 0 || len + r >= size - 1) {
			len += r;
			break;
		}
		len += r;
	}
	close(fd);
	buf[len] = 0;
	return 0;
}

// status_field is the value of "key:" in a /proc/PID/status text, or NULL.
static const char *status_field(const char *status, const char *key) {
	size_t n = strlen(key);
	for (const char *l = status; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, n) == 0 && l[n] == ':')
			return l + n + 1;
	return NULL;
}

// bounding_set is CapBnd of pid ("self", "thread-self" or a number).
static int bounding_set(const char *pid, uint64_t *out, char *err, size_t errlen) {
	char path[64], status[16384];
	snprintf(path, sizeof path, "/proc/%s/status", pid);
	if (read_small(path, status, sizeof status) < 0) {
		snprintf(err, errlen, "open %s: %s", path, errtext(errno));
		return -1;
	}
	const char *v = status_field(status, "CapBnd");
	if (!v) {
		snprintf(err, errlen, "no CapBnd in /proc/%s/status", pid);
		return -1;
	}
	*out = strtoull(v, NULL, 16);
	return 0;
}

// proc_credential is the user, group and supplementary groups pid runs as.
static void proc_credential(const char *pid, struct credential *c) {
	char path[64], status[16384];
	snprintf(path, sizeof path, "/proc/%s/status", pid);
	if (read_small(path, status, sizeof status) < 0)
		fail("container is gone: open %s: %s", path, errtext(errno));
	memset(c, 0, sizeof *c);
	const char *v;
	if ((v = status_field(status, "Uid")))
		c->uid = strtoul(v, NULL, 10);
	if ((v = status_field(status, "Gid")))
		c->gid = strtoul(v, NULL, 10);
	if ((v = status_field(status, "Groups"))) {
		char *end;
		while (c->ngroups < (int)(sizeof c->groups / sizeof c->groups[0])) {
			while (*v == ' ' || *v == '\t')
				v++;
			if (*v < '0' || *v > '9')
				break;
			c->groups[c->ngroups++] = strtoul(v, &end, 10);
			v = end;
		}
	}
}

static unsigned last_cap(void) {
	char buf[32];
	if (read_small("/proc/sys/kernel/cap_last_cap", buf, sizeof buf) == 0) {
		char *end;
		unsigned long n = strtoul(buf, &end, 10);
		if (end != buf && n < 64)
			return n;
	}
	return 40;
}

// limit_bounding_set drops every capability not in mask from the bounding
// set.
static void limit_bounding_set(uint64_t mask) {
	unsigned last = last_cap();
	for (unsigned c = 0; c <= last; c++) {
		if (mask & (1ULL << c))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
			fail("drop capability %u: %s", c, errtext(errno));
	}
}

static int same_namespace(const char *a, const char *b) {
	char x[128], y[128];
	ssize_t n = readlink(a, x, sizeof x - 1), m = readlink(b, y, sizeof y - 1);
	if (n < 0 || m < 0)
		return 0;
	x[n] = 0;
	y[m] = 0;
	return strcmp(x, y) == 0;
}

// setns_path enters the namespace at path; -1 and err set on failure.
static int setns_path(const char *path, int flag, char *err, size_t errlen) {
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "open %s: %s", path, errtext(errno));
		return -1;
	}
	int r = setns(fd, flag);
	int e = errno;
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "%s", errtext(e));
		return -1;
	}
	return 0;
}

// join_namespaces_of enters pid's network, UTS and IPC namespaces where
// they differ from ours.
static void join_namespaces_of(const char *pid) {
	static const struct {
		const char *kind;
		int flag;
	} kinds[] = {{"net", CLONE_NEWNET}, {"uts", CLONE_NEWUTS}, {"ipc", CLONE_NEWIPC}};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		char theirs[64], ours[64], err[256];
		snprintf(theirs, sizeof theirs, "/proc/%s/ns/%s", pid, kinds[i].kind);
		snprintf(ours, sizeof ours, "/proc/thread-self/ns/%s", kinds[i].kind);
		if (same_namespace(theirs, ours))
			continue;
		if (setns_path(theirs, kinds[i].flag, err, sizeof err) < 0)
			fail("enter the container's %s namespace: %s", kinds[i].kind, err);
	}
}

// enter_mount_namespace enters the network, UTS, IPC and mount namespaces
// of a host-image container's process pid, and dir there.
static void enter_mount_namespace(const char *pid, const char *dir) {
	join_namespaces_of(pid);
	char path[64];
	snprintf(path, sizeof path, "/proc/%s/ns/mnt", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail("container is gone: open %s: %s", path, errtext(errno));
	if (unshare(CLONE_FS) < 0)
		fail("unshare filesystem attributes: %s", errtext(errno));
	if (setns(fd, CLONE_NEWNS) < 0)
		fail("enter mount namespace: %s", errtext(errno));
	close(fd);
	if (!dir || !*dir)
		dir = "/";
	if (chdir(dir) < 0)
		fail("working directory %s: %s", dir, errtext(errno));
}

// look_path resolves name through the PATH of env, as the container would.
static const char *look_path(const char *name, char **envp) {
	struct stat st;
	if (strchr(name, '/')) {
		if (stat(name, &st) < 0)
			fail("executable \"%s\" not found: stat %s: %s", name, name, errtext(errno));
		return name;
	}
	const char *path = env_get(envp, "PATH");
	if (!path)
		path = DEFAULT_PATH;
	static char full[4096];
	for (const char *p = path;;) {
		const char *end = strchrnul(p, ':');
		int n = end - p;
		if (n == 0)
			snprintf(full, sizeof full, "%s", name);
		else
			snprintf(full, sizeof full, "%.*s/%s", n, p, name);
		if (stat(full, &st) == 0 && !S_ISDIR(st.st_mode) && (st.st_mode & 0111))
			return full;
		if (!*end)
			break;
		p = end + 1;
	}
	fail("executable \"%s\" not found in $PATH", name);
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

// parse_security reads the marker EncodeExecSecurity wrote:
// CAPS:FLAGS:SECCOMP.
static void parse_security(const char *v, struct security *sec) {
	memset(sec, 0, sizeof *sec);
	const char *c1 = strchr(v, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
	if (!c1 || !c2 || c1 - v != 16 || strchr(c2 + 1, ':'))
		fail("container's security context: malformed " ENV_PREFIX "_SEC");
	for (const char *p = v; p < c1; p++) {
		int h = hexval(*p);
		if (h < 0)
			fail("container's security context: capabilities: malformed");
		sec->caps = sec->caps << 4 | (uint64_t)h;
	}
	for (const char *p = c1 + 1; p < c2; p++) {
		if (*p == 'p')
			sec->privileged = 1;
		else if (*p == 'n')
			sec->no_new_privs = 1;
	}
	const char *hex = c2 + 1;
	size_t hexlen = strlen(hex);
	if (hexlen == 0)
		return;
	size_t bytes = hexlen / 2;
	if (hexlen % 2 || bytes % sizeof(struct sock_filter) || bytes / sizeof(struct sock_filter) > MAX_SECCOMP_INSNS)
		fail("seccomp filter of %zu bytes is malformed", bytes);
	unsigned char *raw = malloc(bytes);
	if (!raw)
		fail("seccomp filter: out of memory");
	for (size_t i = 0; i < bytes; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			fail("container's security context: seccomp filter: malformed");
		raw[i] = hi << 4 | lo;
	}
	// struct sock_filter is {u16 code; u8 jt, jf; u32 k} in native byte
	// order, exactly the encoding of Security.Seccomp.
	sec->filter = (struct sock_filter *)raw;
	sec->filter_len = bytes / sizeof(struct sock_filter);
}

static void install_seccomp(const struct security *sec) {
	struct sock_fprog prog = {.len = sec->filter_len, .filter = sec->filter};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		fail("install seccomp filter: %s", errtext(errno));
}

static void set_credential(const struct credential *c) {
	if (syscall(SYS_setgroups, c->ngroups, c->groups) < 0)
		fail("setgroups: %s", errtext(errno));
	if (syscall(SYS_setgid, c->gid) < 0)
		fail("setgid %u: %s", c->gid, errtext(errno));
	if (syscall(SYS_setuid, c->uid) < 0)
		fail("setuid %u: %s", c->uid, errtext(errno));
}

// set_capabilities sets the permitted and effective sets to caps (within
// the bounding set) and empties the inheritable and ambient ones.
static void set_capabilities(uint64_t caps) {
	uint64_t bnd;
	char err[256];
	if (bounding_set("thread-self", &bnd, err, sizeof err) == 0)
		caps &= bnd;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		fail("clear ambient capabilities: %s", errtext(errno));
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	for (int i = 0; i < 2; i++) {
		data[i].permitted = (uint32_t)(caps >> (32 * i));
		data[i].effective = data[i].permitted;
	}
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail("set capabilities %016llx: %s", (unsigned long long)caps, errtext(errno));
}

// drop_privileges confines the calling process as dropPrivileges does in
// Go: seccomp early without no_new_privs, bounding set, user and groups,
// capabilities, then no_new_privs and seccomp.
static void drop_privileges(const struct security *sec, const struct credential *cred) {
	if (sec->filter_len && !sec->no_new_privs)
		install_seccomp(sec);
	uint64_t caps = sec->caps;
	if (sec->privileged) {
		char err[256];
		if (bounding_set("self", &caps, err, sizeof err) < 0)
			fail("%s", err);
	} else {
		limit_bounding_set(caps);
	}
	if (cred->uid != 0 && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		fail("keep capabilities: %s", errtext(errno));
	set_credential(cred);
	set_capabilities(caps);
	if (sec->no_new_privs) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			fail("set no_new_privs: %s", errtext(errno));
		if (sec->filter_len)
			install_seccomp(sec);
	}
}

// exec_in_container runs argv in the container from an image whose init is
// pid (its namespaces, PID namespace included, and its root, as its user)
// and exits with its status.
static void exec_in_container(const char *pid, const char *dir, char **argv, char **envp, const struct security *sec) {
	struct credential cred;
	proc_credential(pid, &cred);
	uint64_t bnd;
	char err[256];
	if (bounding_set(pid, &bnd, err, sizeof err) < 0)
		fail("container is gone: %s", err);
	limit_bounding_set(bnd);
	join_namespaces_of(pid);
	char theirs[64];
	snprintf(theirs, sizeof theirs, "/proc/%s/ns/pid", pid);
	if (!same_namespace(theirs, "/proc/thread-self/ns/pid") && setns_path(theirs, CLONE_NEWPID, err, sizeof err) < 0)
		fail("enter the container's pid namespace: %s", err);
	char root[64];
	snprintf(root, sizeof root, "/proc/%s/root", pid);
	if (chroot(root) < 0)
		fail("enter container root: %s", errtext(errno));
	if (!dir || !*dir)
		dir = "/";
	if (chdir(dir) < 0)
		fail("working directory %s: chdir %s: %s", dir, dir, errtext(errno));
	const char *path = look_path(argv[0], envp);
	if (sec && sec->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("set no_new_privs: %s", errtext(errno));
	if (sec && sec->filter_len)
		install_seccomp(sec);
	pid_t child = fork();
	if (child < 0)
		fail("fork: %s", errtext(errno));
	if (child == 0) {
		// The child reports its own failure on fd 3 (exit status 127,
		// which the helper passes on); fd 3 closes when the exec works.
		set_credential(&cred);
		execve(path, argv, envp);
		fail("fork/exec %s: %s", path, errtext(errno));
	}
	// Set-up is over once the child execs: its copy of fd 3 is the last.
	close(REPORT_FD);
	int status;
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			_exit(127);
	if (WIFSIGNALED(status))
		_exit(128 + WTERMSIG(status));
	_exit(WEXITSTATUS(status));
}

__attribute__((constructor)) static void minilet_exec(int argc, char **argv, char **envp) {
	if (argc < 1 || strcmp(argv[0], ARG0) != 0)
		return;
	const char *marker = env_get(envp, ENV_PREFIX);
	if (!marker || !*marker)
		return;
	fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);
	int sep = -1;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			sep = i;
			break;
		}
	if (sep < 0 || sep == argc - 1)
		fail("trampoline: no command");
	char pidbuf[32];
	int pidlen = snprintf(pidbuf, sizeof pidbuf, "%d", (int)getpid());
	for (int i = 1; i < sep; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/cgroup.procs", argv[i]);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			fail("join cgroup %s: open %s: %s", argv[i], path, errtext(errno));
		if (write(fd, pidbuf, pidlen) != pidlen)
			fail("join cgroup %s: write %s: %s", argv[i], path, errtext(errno));
		close(fd);
	}
	const char *pid_env = env_get(envp, ENV_PREFIX "_PID");
	const char *mnt_env = env_get(envp, ENV_PREFIX "_MNT");
	const char *dir_env = env_get(envp, ENV_PREFIX "_DIR");
	const char *sec_env = env_get(envp, ENV_PREFIX "_SEC");
	struct security secbuf, *sec = NULL;
	if (sec_env && *sec_env) {
		parse_security(sec_env, &secbuf);
		sec = &secbuf;
	}
	// The command's environment: ours without the markers.
	int n = 0;
	for (char **e = envp; *e; e++)
		n++;
	char **env = calloc(n + 1, sizeof *env);
	if (!env)
		fail("out of memory");
	n = 0;
	for (char **e = envp; *e; e++)
		if (strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0)
			env[n++] = *e;
	char **cmd = argv + sep + 1;
	if (pid_env && *pid_env)
		exec_in_container(pid_env, dir_env, cmd, env, sec);
	struct credential cred;
	int have_cred = 0;
	if (mnt_env && *mnt_env) {
		enter_mount_namespace(mnt_env, dir_env);
		if (sec) {
			proc_credential(mnt_env, &cred);
			have_cred = 1;
		}
	}
	const char *path = look_path(cmd[0], env);
	if (have_cred)
		drop_privileges(sec, &cred);
	execve(path, cmd, env);
	fail("%s", errtext(errno));
}
