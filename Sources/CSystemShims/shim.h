// Small shims over glibc calls that Swift's Glibc module does not import, because glibc declares
// them only under _GNU_SOURCE or not at all. The spawning ones close a descriptor leak between
// threads: a child that another thread starts must never inherit a pipe end that is not its own (it
// would keep the pipe open, and whoever waits for end-of-file would wait for that child's whole
// life).
#ifndef DC_SYSTEM_SHIM_H
#define DC_SYSTEM_SHIM_H

#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc declares these only under _GNU_SOURCE, and defining that here would change shared types
// (fd_set) against every other module that includes the same headers. The declarations are
// glibc's own.
extern int pipe2(int fds[2], int flags);
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int lowest);
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *actions, const char *path);
extern int sync_file_range(int fd, __off64_t offset, __off64_t count, unsigned int flags);
extern int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

// renameat2(RENAME_NOREPLACE) (glibc 2.28, Linux 3.15): gives `oldpath` the name `newpath` only if
// that name does not exist, atomically; EEXIST if it does, EINVAL on a file system without it.
static inline int dc_rename_noreplace(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, 1 /* RENAME_NOREPLACE */);
}

// pipe2(O_CLOEXEC): both ends are close-on-exec from the moment they exist. pipe() followed by
// fcntl(FD_CLOEXEC) leaves a window in which a fork on another thread inherits them.
static inline int dc_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

// The child closes every descriptor from `lowest` on before exec (glibc 2.34), so it inherits only
// what the file actions dup2 onto 0, 1 and 2, whatever the rest of the process has open.
static inline int dc_spawn_close_from(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

// The child changes to `path` before exec (glibc 2.29); no shell and no chdir in the parent.
static inline int dc_spawn_chdir(posix_spawn_file_actions_t *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np(actions, path);
}

// pidfd_open(2) (Linux 5.3), through syscall(2) because glibc 2.36 declares no wrapper in the
// headers Swift imports and Swift cannot call the variadic syscall itself: a descriptor for the
// process `pid` that polls readable once it has exited (a zombie not yet reaped counts), so a parent
// waits for its child's exit with a timeout instead of sleeping between tries. Close-on-exec from
// creation. -1 and errno on failure (ENOSYS on an older kernel, EPERM under a seccomp filter,
// EMFILE); the caller then sleeps between tries as before.
static inline int dc_pidfd_open(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

// eventfd(2), close-on-exec and non-blocking: a counter one thread writes to wake another that
// polls it. Swift's Glibc module does not import <sys/eventfd.h>.
static inline int dc_eventfd_cloexec(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

// The kernel key-retention service (keyrings(7)). glibc has no wrappers for add_key(2) and
// keyctl(2) (they live in libkeyutils, which is not linked), and Swift cannot call the variadic
// syscall(2), so each operation the toolkit uses gets a typed wrapper here. All return -1 and set
// errno on failure, as the system calls do.

// Adds a key of `type` to `keyring`, or updates the payload of the key of that type and
// description already there. Returns the key's serial number.
static inline int32_t dc_add_key(const char *type, const char *description, const void *payload, size_t length,
                                 int32_t keyring) {
    return (int32_t)syscall(SYS_add_key, type, description, payload, length, keyring);
}

// KEYCTL_GET_KEYRING_ID (0): the serial number of a special keyring (KEY_SPEC_*), creating it
// only when `create` is non-zero.
static inline int32_t dc_keyctl_get_keyring_id(int32_t keyring, int create) {
    return (int32_t)syscall(SYS_keyctl, 0, keyring, create);
}

// KEYCTL_SET_TIMEOUT (15): the key expires `seconds` from now (0 clears the timeout).
static inline long dc_keyctl_set_timeout(int32_t key, unsigned int seconds) {
    return syscall(SYS_keyctl, 15, key, seconds);
}

// KEYCTL_SEARCH (10): the serial number of the key of `type` and `description` in `keyring` or a
// keyring nested in it; no destination keyring.
static inline int32_t dc_keyctl_search(int32_t keyring, const char *type, const char *description) {
    return (int32_t)syscall(SYS_keyctl, 10, keyring, type, description, 0);
}

// KEYCTL_READ (11): copies at most `length` bytes of the payload into `buffer` and returns the
// payload's whole length (more than `length` when the buffer was too small).
static inline long dc_keyctl_read(int32_t key, void *buffer, size_t length) {
    return syscall(SYS_keyctl, 11, key, buffer, length);
}

// KEYCTL_INVALIDATE (21): the key is gone at once for everyone, and garbage-collected.
static inline long dc_keyctl_invalidate(int32_t key) { return syscall(SYS_keyctl, 21, key); }

// Starts the disk's writeback of `count` bytes of `fd` from `offset` and returns at once
// (SYNC_FILE_RANGE_WRITE, 2 in glibc's fcntl.h): a long write that must end with fsync starts
// writing back what it wrote while it goes on, and the fsync then waits only for the rest. It
// makes nothing durable by itself (no metadata, no cache flush); the fsync still does that.
static inline int dc_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, offset, count, 2);
}

#endif
