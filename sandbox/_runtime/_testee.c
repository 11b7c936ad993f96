/* The grader's exec hook: the programs a verifier starts run as the testee, not as the grader.
 *
 * Loaded with LD_PRELOAD into the verifier's shell (bash running /tests/test.sh), which runs as the
 * grader identity with a few capabilities (CAP_SETUID and CAP_SETGID among them, ambient). Bash
 * forks, opens the command's redirections in the child (still the grader: `> reward.txt` is the
 * grader's write), then calls execve; this hook decides, between fork and exec, who the program
 * runs as:
 *
 *   - AGENTRL_GRADER=1 in its environment: the grader, capabilities and hook kept (the variable is
 *     removed, so the program's own children are decided again): a verifier's checker that starts
 *     the agent's programs through exec itself (CPython's subprocess, os.system);
 *   - the verifier's own program (the file run is under /tests/, or bash, sh, dash or python runs a
 *     script under /tests/): the grader too, so that a verifier program may write the reward; with
 *     the hook kept when its interpreter is one of those (their children are decided again), else
 *     without any capability;
 *   - anything else (the agent's script, a test runner, git, grep): the testee. No supplementary
 *     groups, the testee's gid and uid, every capability cleared (effective, permitted, inheritable,
 *     ambient), LD_PRELOAD and the hook's variables removed from its environment.
 *
 * Writes of the grader's follow no link of the agent's: the open family is guarded in _testee_files.c.
 *
 * Configuration, read once when the hook loads: AGENTRL_TESTEE="UID:GID". A process without
 * CAP_SETUID passes its calls through unchanged. Fails closed: without the configuration, or when a
 * step of the switch fails, the exec is refused with EPERM and nothing runs. posix_spawn, whose
 * child execs inside libc where no hook reaches, is refused in a process of the grader; system()
 * and popen() are done here, by fork and the hooked execve.
 *
 * No libc is linked (-nostdlib): the libc functions used (syscall, getenv, fork, waitpid) are found
 * in the process that loads the hook, glibc or musl alike. Raw syscalls for the credentials, not
 * libc's setresuid: that one signals every thread, which is wrong in a vfork child (CPython's
 * subprocess forks that way).
 */
#include "_testee.h"

HIDDEN long testee_uid = -1, testee_gid = -1;

static long parse_id(const char **s) {
    long v = 0;
    int digits = 0;
    while (**s >= '0' && **s <= '9' && digits < 11) {
        v = v * 10 + (**s - '0');
        (*s)++;
        digits++;
    }
    return digits ? v : -1;
}

__attribute__((constructor)) static void read_config(void) {
    const char *s = getenv("AGENTRL_TESTEE");
    if (!s) return;
    long uid = parse_id(&s);
    if (*s++ != ':') return;
    long gid = parse_id(&s);
    if (*s != '\0' || uid <= 0 || gid <= 0) return;
    testee_uid = uid;
    testee_gid = gid;
}

HIDDEN int starts_with(const char *s, const char *prefix) {
    while (*prefix) {
        if (*s++ != *prefix++) return 0;
    }
    return 1;
}

HIDDEN int equal(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static const char *base_name(const char *path) {
    const char *b = path;
    for (const char *p = path; *p; p++) {
        if (*p == '/') b = p + 1;
    }
    return b;
}

static int is_grader(void) {
    struct cap_header h = {CAP_VERSION_3, 0};
    struct cap_data d[2] = {{0, 0, 0}, {0, 0, 0}};
    if (syscall(SYS_capget, &h, d) != 0) return 1; /* unknown: decide (switch, or refuse) */
    return (d[0].effective >> CAP_SETUID) & 1;
}

static int drop_capabilities(void) {
    struct cap_header h = {CAP_VERSION_3, 0};
    struct cap_data none[2] = {{0, 0, 0}, {0, 0, 0}};
    struct cap_data now[2] = {{0, 0, 0}, {0, 0, 0}};
    if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return -1;
    if (syscall(SYS_capset, &h, none) != 0) return -1;
    if (syscall(SYS_capget, &h, now) != 0) return -1;
    return (now[0].effective | now[0].permitted | now[0].inheritable | now[1].effective | now[1].permitted
            | now[1].inheritable) ? -1 : 0;
}

/* What the program inherits: pipes and sockets become the testee's, so that it can reopen them by
 * path (/dev/fd/63 of a process substitution, /dev/stdin of a pipeline: it holds them already); a
 * file of the grader's open for writing on a descriptor past 2 (`exec 3> reward.txt`) is closed, so
 * that the code under test cannot write through it (0, 1 and 2 are the command's own redirections). */
static void hand_over_descriptors(void) {
    struct stat st;
    for (int fd = 0; fd < 1024; fd++) {
        long flags = syscall(SYS_fcntl, fd, F_GETFD, 0);
        if (flags < 0 || (flags & FD_CLOEXEC)) continue;
        if (syscall(SYS_fstat, fd, &st) != 0) continue;
        if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
            syscall(SYS_fchown, fd, testee_uid, testee_gid);
        } else if (fd > 2 && S_ISREG(st.st_mode) && st.st_uid != (unsigned long)testee_uid
                   && (syscall(SYS_fcntl, fd, F_GETFL, 0) & O_ACCMODE) != O_RDONLY) {
            syscall(SYS_close, fd);
        }
    }
}

static int become_testee(void) {
    if (testee_uid <= 0 || testee_gid <= 0) return -1;
    hand_over_descriptors();
    if (syscall(SYS_setgroups, 0, NULL) != 0) return -1;
    if (syscall(SYS_setresgid, testee_gid, testee_gid, testee_gid) != 0) return -1;
    if (syscall(SYS_setresuid, testee_uid, testee_uid, testee_uid) != 0) return -1;
    if (drop_capabilities() != 0) return -1;
    if (syscall(SYS_getuid) != testee_uid || syscall(SYS_geteuid) != testee_uid) return -1;
    return 0;
}

/* The path an open file descriptor was reached by (its true path), NUL-terminated; -1 if unknown. */
HIDDEN long fd_path(long fd, char *out) {
    char link[32] = "/proc/self/fd/";
    int n = 14, digits = 0;
    char rev[12];
    do rev[digits++] = (char)('0' + fd % 10), fd /= 10; while (fd && digits < 11);
    while (digits) link[n++] = rev[--digits];
    link[n] = '\0';
    long len = syscall(SYS_readlinkat, AT_FDCWD, link, out, MAX_PATH - 1);
    if (len <= 0) return -1;
    out[len] = '\0';
    return len;
}

/* `path` made absolute (from directory `dirfd`, or the working directory) with ".", ".." and repeated
 * slashes resolved, links not followed. */
HIDDEN int normalise_at(int dirfd, const char *path, char *out) {
    char raw[MAX_PATH * 2];
    size_t n = 0;
    if (path[0] != '/') {
        if (dirfd == AT_FDCWD ? syscall(SYS_getcwd, raw, MAX_PATH) <= 0 : fd_path(dirfd, raw) < 0) return -1;
        while (raw[n]) n++;
        raw[n++] = '/';
    }
    for (const char *p = path; *p; p++) {
        if (n >= sizeof(raw) - 1) return -1;
        raw[n++] = *p;
    }
    raw[n] = '\0';
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        while (raw[i] == '/') i++;
        size_t j = i;
        while (j < n && raw[j] != '/') j++;
        size_t len = j - i;
        if (len == 0 || (len == 1 && raw[i] == '.')) {
        } else if (len == 2 && raw[i] == '.' && raw[i + 1] == '.') {
            while (o > 0 && out[o - 1] != '/') o--;
            if (o > 0) o--;
        } else {
            if (o + len + 2 >= MAX_PATH) return -1;
            out[o++] = '/';
            for (size_t k = i; k < j; k++) out[o++] = raw[k];
        }
        i = j;
    }
    if (o == 0) out[o++] = '/';
    out[o] = '\0';
    return 0;
}

static int normalise(const char *path, char *out) {
    return normalise_at(AT_FDCWD, path, out);
}

static int under_tests(const char *path) {
    char abs[MAX_PATH];
    return normalise(path, abs) == 0 && starts_with(abs, "/tests/");
}

/* bash, sh, dash, python, python3, python3.N: interpreters whose children the hook decides again. */
static int hooked_interpreter(const char *name) {
    const char *b = base_name(name);
    return equal(b, "bash") || equal(b, "sh") || equal(b, "dash") || equal(b, "python") || starts_with(b, "python3");
}

/* The script an interpreter's arguments run (NULL: none, e.g. -c or -m). */
static const char *script_of(char *const argv[]) {
    int python = starts_with(base_name(argv[0]), "python");
    for (int i = 1; argv[i]; i++) {
        const char *a = argv[i];
        if (a[0] != '-' && a[0] != '+') return a;
        if (equal(a, "--")) return argv[i + 1];
        if (equal(a, "-c") || (python && equal(a, "-m"))) return NULL;
        if ((python && (equal(a, "-W") || equal(a, "-X"))) || (!python && (equal(a, "-o") || equal(a, "+o")
                || equal(a, "-O") || equal(a, "+O")))) {
            if (!argv[++i]) return NULL;
        }
    }
    return NULL;
}

/* Whether a file under /tests/ starts with a #! line naming a hooked interpreter (directly or via env). */
static int hooked_shebang(const char *path) {
    char head[256];
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY_CLOEXEC, 0);
    if (fd < 0) return 0;
    long n = syscall(SYS_read, fd, head, sizeof(head) - 1);
    syscall(SYS_close, fd);
    if (n < 3 || head[0] != '#' || head[1] != '!') return 0;
    head[n] = '\0';
    char *words[3] = {NULL, NULL, NULL};
    int w = 0;
    for (char *p = head + 2; *p && *p != '\n' && w < 3;) {
        while (*p == ' ' || *p == '\t') *p++ = '\0';
        if (!*p || *p == '\n') break;
        words[w++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
        if (*p == '\n') *p = '\0';
    }
    if (!words[0]) return 0;
    if (equal(base_name(words[0]), "env") && words[1]) return hooked_interpreter(words[1]);
    return hooked_interpreter(words[0]);
}

static enum who decide(const char *path, char *const argv[]) {
    if (under_tests(path)) return hooked_shebang(path) ? GRADER_HOOKED : GRADER_PLAIN;
    if (argv && argv[0] && hooked_interpreter(path)) {
        const char *script = script_of(argv);
        if (script && under_tests(script)) return GRADER_HOOKED;
    }
    return TESTEE;
}

/* envp without the hook's variables (all of them unless `keep_hook`); *flag: AGENTRL_GRADER=1 was set. */
static int filter_env(char *const envp[], const char **out, int keep_hook, int *flag) {
    int n = 0;
    *flag = 0;
    for (int i = 0; envp && envp[i]; i++) {
        if (starts_with(envp[i], "AGENTRL_GRADER=")) {
            *flag = equal(envp[i] + 15, "1");
            continue;
        }
        if (!keep_hook && (starts_with(envp[i], "LD_PRELOAD=") || starts_with(envp[i], "AGENTRL_TESTEE="))) continue;
        if (n >= MAX_ENV - 1) return -1;
        out[n++] = envp[i];
    }
    out[n] = NULL;
    return 0;
}


/* ------------------------------------------------------------------ exec */
int execve(const char *path, char *const argv[], char *const envp[]) {
    const char *env[MAX_ENV];
    int flag;
    if (!is_grader()) return (int)syscall(SYS_execve, path, argv, envp);
    if (filter_env(envp, env, 1, &flag) != 0) {
        errno = E2BIG;
        return -1;
    }
    enum who who = flag ? GRADER_HOOKED : decide(path, argv);
    if (who == GRADER_HOOKED) return (int)syscall(SYS_execve, path, argv, env);
    filter_env(envp, env, 0, &flag);
    if ((who == GRADER_PLAIN ? drop_capabilities() : become_testee()) != 0) {
        errno = EPERM;
        return -1;
    }
    return (int)syscall(SYS_execve, path, argv, env);
}

int execv(const char *path, char *const argv[]) {
    return execve(path, argv, environ);
}

int posix_spawn(int *pid, const char *path, const void *actions, const void *attrs, char *const argv[],
                char *const envp[]) {
    (void)pid, (void)path, (void)actions, (void)attrs, (void)argv, (void)envp;
    return EPERM; /* its child would exec where the hook cannot decide: see the comment at the top */
}

int posix_spawnp(int *pid, const char *file, const void *actions, const void *attrs, char *const argv[],
                 char *const envp[]) {
    return posix_spawn(pid, file, actions, attrs, argv, envp);
}

/* popen through fork and the hooked execve (libc's own spawns inside libc, where no hook reaches). */
#define MAX_POPEN 64
static struct { void *file; int pid; } popened[MAX_POPEN];

void *popen(const char *command, const char *how) {
    int fds[2], reading = how[0] == 'r';
    if ((how[0] != 'r' && how[0] != 'w') || syscall(SYS_pipe2, fds, O_CLOEXEC) != 0) {
        errno = EINVAL;
        return NULL;
    }
    int pid = fork();
    if (pid == 0) {
        int mine = reading ? fds[1] : fds[0];
        syscall(SYS_dup3, mine, reading ? 1 : 0, 0);
        char *argv[] = {"sh", "-c", (char *)command, NULL};
        execve("/bin/sh", argv, environ);
        syscall(SYS_exit_group, 127);
    }
    syscall(SYS_close, reading ? fds[1] : fds[0]);
    int ours = reading ? fds[0] : fds[1];
    void *f = pid < 0 ? NULL : fdopen(ours, reading ? "r" : "w");
    for (int i = 0; f && i < MAX_POPEN; i++) {
        if (!popened[i].file) {
            popened[i].file = f, popened[i].pid = pid;
            return f;
        }
    }
    syscall(SYS_close, ours);
    return NULL;
}

int pclose(void *f) {
    for (int i = 0; i < MAX_POPEN; i++) {
        if (popened[i].file == f) {
            int pid = popened[i].pid, status = 0;
            popened[i].file = NULL;
            fclose(f);
            while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR) return -1;
            }
            return status;
        }
    }
    errno = ECHILD;
    return -1;
}

int system(const char *command) {
    if (!command) return 1;
    int pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char *argv[] = {"sh", "-c", (char *)command, NULL};
        execve("/bin/sh", argv, environ);
        syscall(SYS_exit_group, 127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}
