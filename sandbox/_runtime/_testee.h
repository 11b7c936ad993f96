/* Shared by the grader's exec hook (_testee.c: who a program runs as) and its write guard
 * (_testee_files.c: the grader's writes follow no link of the agent's). See _testee.c. */
#ifndef AGENTRL_TESTEE_H
#define AGENTRL_TESTEE_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>

extern long syscall(long number, ...);
extern char *getenv(const char *name);
extern int fork(void);
extern int waitpid(int pid, int *status, int options);
extern void *fdopen(int fd, const char *mode);
extern int fclose(void *stream);
extern char **environ;

#define CAP_SETUID 7
#define CAP_VERSION_3 0x20080522
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#define MAX_ENV 4096
#define MAX_PATH 4096
#define O_RDONLY_CLOEXEC (O_RDONLY | O_CLOEXEC)

enum who { TESTEE, GRADER_HOOKED, GRADER_PLAIN };
struct cap_header { unsigned int version; int pid; };
struct cap_data { unsigned int effective, permitted, inheritable; };

#define HIDDEN __attribute__((visibility("hidden")))

HIDDEN extern long testee_uid, testee_gid;
HIDDEN int starts_with(const char *s, const char *prefix);
HIDDEN int equal(const char *a, const char *b);
HIDDEN long fd_path(long fd, char *out);
HIDDEN int normalise_at(int dirfd, const char *path, char *out);

#endif
