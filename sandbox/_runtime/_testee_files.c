/* The grader's writes follow no link of the agent's: the open family in a process of the grader's.
 *
 * In a process of the grader's (its uid is neither the testee's nor root's), a file opened for writing
 * that is not the testee's own (the reward files, the tests, the hook itself) must be reached by its
 * true path, and a new file must be created in a directory of the testee's or one reached by its true
 * path; a file of the grader's with a second name (a hard link) is refused. The check opens the path
 * without side effects (O_PATH), compares the file's true path (/proc/self/fd) with the one given, and
 * then opens that very file again through /proc/self/fd: nothing can be swapped in between. See _testee.c.
 */
#include "_testee.h"

#define WRITES (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)

static int grader_process(void) {
    long uid = syscall(SYS_getuid);
    return testee_uid > 0 && uid != testee_uid && uid != 0;
}

/* Whether the object open at `fd` was reached from `dirfd` by `path` itself, no link on the way. */
static int true_path(long fd, int dirfd, const char *path) {
    char real[MAX_PATH], given[MAX_PATH];
    if (fd_path(fd, real) < 0 || normalise_at(dirfd, path, given) != 0) return 0;
    return equal(real, given);
}

static int reopen(long pfd, int flags, int mode) {
    char link[MAX_PATH];
    char *p = link;
    const char *prefix = "/proc/self/fd/";
    while (*prefix) *p++ = *prefix++;
    char rev[12];
    int digits = 0;
    long fd = pfd;
    do rev[digits++] = (char)('0' + fd % 10), fd /= 10; while (fd && digits < 11);
    while (digits) *p++ = rev[--digits];
    *p = '\0';
    long r = syscall(SYS_openat, AT_FDCWD, link, flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW), mode);
    syscall(SYS_close, pfd);
    return (int)r;
}

static int refuse(long fd, int err) {
    if (fd >= 0) syscall(SYS_close, fd);
    errno = err;
    return -1;
}

/* A new file: its directory must be the testee's or reached by its true path; the name is no link. */
static int create_new(int dirfd, const char *path, int flags, int mode) {
    char dir[MAX_PATH];
    size_t n = 0, cut = 0;
    for (; path[n] && n < MAX_PATH - 1; n++) {
        dir[n] = path[n];
        if (path[n] == '/') cut = n + 1;
    }
    if (path[n] || !path[cut]) return refuse(-1, path[n] ? ENAMETOOLONG : EISDIR);
    if (cut == 0) {
        dir[0] = '.', dir[1] = '\0';
    } else {
        dir[cut > 1 ? cut - 1 : 1] = '\0';
    }
    struct stat st;
    long dfd = syscall(SYS_openat, dirfd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (dfd < 0) return -1;
    if (syscall(SYS_fstat, dfd, &st) != 0) return refuse(dfd, EACCES);
    if (st.st_uid != (unsigned long)testee_uid && !true_path(dfd, dirfd, dir)) return refuse(dfd, EACCES);
    long r = syscall(SYS_openat, dfd, path + cut, flags | O_NOFOLLOW, mode);
    int err = errno;
    syscall(SYS_close, dfd);
    errno = err;
    return (int)r;
}

static int guarded_open(int dirfd, const char *path, int flags, int mode) {
    if (!(flags & WRITES) || !grader_process()) return (int)syscall(SYS_openat, dirfd, path, flags, mode);
    long pfd = syscall(SYS_openat, dirfd, path, O_PATH | O_CLOEXEC | (flags & O_NOFOLLOW), 0);
    if (pfd < 0) return errno == ENOENT && (flags & O_CREAT) ? create_new(dirfd, path, flags, mode) : -1;
    struct stat st;
    if (syscall(SYS_fstat, pfd, &st) != 0) return refuse(pfd, EACCES);
    if (S_ISLNK(st.st_mode)) return refuse(pfd, ELOOP);
    if ((flags & O_CREAT) && (flags & O_EXCL)) return refuse(pfd, EEXIST);
    if (S_ISREG(st.st_mode) && st.st_uid != (unsigned long)testee_uid
            && (st.st_nlink > 1 || !true_path(pfd, dirfd, path))) return refuse(pfd, EACCES);
    return reopen(pfd, flags, mode);
}

static int mode_arg(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
}

/* open, open64, openat, openat64: the mode argument is there only with O_CREAT or O_TMPFILE. */
#define MODE(flags) ({ va_list ap; va_start(ap, flags); int m = mode_arg(flags, ap); va_end(ap); m; })
int open(const char *path, int flags, ...) { return guarded_open(AT_FDCWD, path, flags, MODE(flags)); }
int open64(const char *path, int flags, ...) { return guarded_open(AT_FDCWD, path, flags, MODE(flags)); }
int openat(int dirfd, const char *path, int flags, ...) { return guarded_open(dirfd, path, flags, MODE(flags)); }
int openat64(int dirfd, const char *path, int flags, ...) { return guarded_open(dirfd, path, flags, MODE(flags)); }

int __open_2(const char *path, int flags) { return guarded_open(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return guarded_open(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return guarded_open(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) { return guarded_open(dirfd, path, flags, 0); }
int creat(const char *path, mode_t mode) { return guarded_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, (int)mode); }
int creat64(const char *path, mode_t mode) { return guarded_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, (int)mode); }

/* fopen through the guarded open (libc's own opens the file inside libc, where no hook reaches). */
void *fopen(const char *path, const char *how) {
    int flags = 0, plus = 0;
    for (const char *c = how + 1; *c; c++) {
        if (*c == '+') plus = 1;
        else if (*c == 'e') flags |= O_CLOEXEC;
        else if (*c == 'x') flags |= O_EXCL;
    }
    if (how[0] == 'r') flags |= plus ? O_RDWR : O_RDONLY;
    else if (how[0] == 'w') flags |= (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC;
    else if (how[0] == 'a') flags |= (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
    else {
        errno = EINVAL;
        return NULL;
    }
    int fd = guarded_open(AT_FDCWD, path, flags, 0666);
    if (fd < 0) return NULL;
    void *f = fdopen(fd, how);
    if (!f) syscall(SYS_close, fd);
    return f;
}

void *fopen64(const char *path, const char *how) { return fopen(path, how); }

