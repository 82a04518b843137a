// Small shims over glibc calls that Swift's Glibc module does not import, because glibc declares
// them only under _GNU_SOURCE or not at all. The spawning ones close a descriptor leak between
// threads: a child that another thread starts must never inherit a pipe end that is not its own (it
// would keep the pipe open, and whoever waits for end-of-file would wait for that child's whole
// life).
#ifndef DC_SYSTEM_SHIM_H
#define DC_SYSTEM_SHIM_H

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
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

// --- Secrets in this process: no core dump, no same-user reader of its memory -----------------

// prctl(PR_SET_DUMPABLE, 0): no core dump, and /proc/PID/{mem,environ,fd,...} of this process
// belong to root, so another process of the same user (a plug-in reading /proc/$PPID/environ)
// cannot read them or ptrace this one. prctl is variadic, which Swift cannot call.
static inline int dc_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

// --- Confining a child: Landlock (landlock(7)) and a seccomp filter ---------------------------
// The structures and constants are spelled out here rather than taken from <linux/landlock.h>,
// whose version follows the build machine's kernel headers, not the kernel the tool runs on: the
// tool asks the running kernel for its Landlock ABI and uses what that ABI knows.

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

// struct landlock_ruleset_attr as of ABI 6 (handled_access_net from ABI 4, scoped from ABI 6).
struct dc_landlock_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

// struct landlock_path_beneath_attr (packed in the kernel's header too).
struct dc_landlock_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

// The running kernel's Landlock ABI version (1, 2, ...), or -1 and errno when it has none
// (ENOSYS: not built in, or hidden by a seccomp filter; EOPNOTSUPP: built in but disabled at boot).
static inline int dc_landlock_abi(void) {
    return (int)syscall(SYS_landlock_create_ruleset, NULL, 0, 1U /* LANDLOCK_CREATE_RULESET_VERSION */);
}

// A ruleset that handles the file-system rights `handled_fs` and the scopes `scoped` (ABI 6 and
// later; pass 0 before), sized for `abi` so an older kernel accepts it. A close-on-exec
// descriptor, or -1 and errno.
static inline int dc_landlock_create_ruleset(uint64_t handled_fs, uint64_t scoped, int abi) {
    struct dc_landlock_ruleset_attr attr = {handled_fs, 0, scoped};
    size_t size = abi >= 6 ? sizeof attr : abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
    return (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0U);
}

// open(path, O_PATH | O_CLOEXEC): a descriptor that names a file or directory, for a Landlock
// rule, without opening it for reading (which a directory the caller cannot list would refuse).
// glibc defines O_PATH only under _GNU_SOURCE; the value is the kernel's.
static inline int dc_open_path(const char *path) { return open(path, 010000000 /* O_PATH */ | O_CLOEXEC); }

// Allows `access` on the file or directory hierarchy that `parent_fd` (an O_PATH descriptor) is.
static inline int dc_landlock_allow_beneath(int ruleset, int parent_fd, uint64_t access) {
    struct dc_landlock_path_beneath_attr attr = {access, parent_fd};
    return (int)syscall(SYS_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &attr, 0U);
}

#if defined(__x86_64__)
#define DC_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define DC_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

// The seccomp filter's instructions, one per line below.
#define DC_LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define DC_LOAD_ARG(n) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args) + 8 * (n))
#define DC_IF_NOT(value, skip) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), 0, (skip))
#define DC_REFUSE BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)
#define DC_ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
// A system call refused outright: two instructions (the number is in the accumulator).
#define DC_DENY(nr) DC_IF_NOT(nr, 1), DC_REFUSE
// A signal call refused when its argument `n` (a thread id) is `tid`: reload the number after.
#define DC_DENY_TID(call, n, tid) \
    DC_IF_NOT(call, 3), DC_LOAD_ARG(n), DC_IF_NOT((uint32_t)(tid), 1), DC_REFUSE, DC_LOAD(nr)

// A seccomp filter for the calling thread, inherited by every child it starts. Refused (EPERM):
// - the kernel keyring (where the client's unlocked store key lives, which no path rule covers);
// - another process's memory and descriptors (ptrace, process_vm_readv/writev, pidfd_getfd);
// - UNIX-domain sockets (socket(AF_UNIX, ...)): a socket reached by its path is no file access
//   Landlock controls, and behind one waits a program that is not confined (the session bus and
//   `systemd-run --user`, an X server, an agent); socketpair stays;
// - changing a file's mode, owner or extended attributes by path, and truncating one by path:
//   Landlock controls none of these (truncate only from ABI 3);
// - a signal to `tid`, the thread starting the child: it shares the child's Landlock domain until
//   it ends, and a SIGSTOP sent to it would stop the whole parent;
// - every system call of another architecture's table (i386's int 0x80; x32's numbers, which
//   carry __X32_SYSCALL_BIT), so that none of the above slips past by another number.
// Needs no new privileges (set first). -1 and errno on failure; ENOSYS on an architecture this
// file does not describe.
static inline int dc_install_child_filter(pid_t tid) {
#ifdef DC_AUDIT_ARCH
    struct sock_filter filter[] = {
        DC_LOAD(arch),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, DC_AUDIT_ARCH, 1, 0),
        DC_REFUSE,
        DC_LOAD(nr),
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000U /* __X32_SYSCALL_BIT */, 0, 1),
        DC_REFUSE,
#endif
        DC_DENY(__NR_keyctl),
        DC_DENY(__NR_add_key),
        DC_DENY(__NR_request_key),
        DC_DENY(__NR_ptrace),
        DC_DENY(__NR_process_vm_readv),
        DC_DENY(__NR_process_vm_writev),
        DC_DENY(438 /* pidfd_getfd */),
#if defined(__x86_64__)
        DC_DENY(__NR_chmod),
        DC_DENY(__NR_chown),
        DC_DENY(__NR_lchown),
        DC_DENY(__NR_truncate),
#endif
        DC_DENY(__NR_fchmodat),
        DC_DENY(452 /* fchmodat2 */),
        DC_DENY(__NR_fchownat),
        DC_DENY(__NR_setxattr),
        DC_DENY(__NR_lsetxattr),
        DC_DENY(__NR_removexattr),
        DC_DENY(__NR_lremovexattr),
#if !defined(__x86_64__)
        DC_DENY(__NR_truncate),
#endif
        DC_DENY_TID(__NR_tkill, 0, tid),
        DC_DENY_TID(__NR_tgkill, 1, tid),
        DC_DENY_TID(__NR_rt_tgsigqueueinfo, 1, tid),
        DC_DENY_TID(434 /* pidfd_open */, 0, tid),
        DC_IF_NOT(__NR_socket, 3),
        DC_LOAD_ARG(0),
        DC_IF_NOT(1 /* AF_UNIX */, 1),
        DC_REFUSE,
        DC_ALLOW,
    };
    struct sock_fprog program = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0);
#else
    (void)tid;
    errno = ENOSYS;
    return -1;
#endif
}

// Drops every capability of the calling thread for good, and so of every child it starts, root
// or not: the bounding set (root only; EPERM otherwise, harmless: an ordinary user's child gains
// none through exec), the securebits that give root its capabilities back at exec (root only),
// the ambient set, and the effective, permitted and inheritable sets. A plug-in run by root
// keeps uid 0 but cannot mknod a disk, load a module or override file permissions.
static inline int dc_drop_capabilities(void) {
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL) break;
    }
    // SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED
    (void)prctl(PR_SET_SECUREBITS, 0x0F, 0, 0, 0);
    (void)prctl(47 /* PR_CAP_AMBIENT */, 4 /* PR_CAP_AMBIENT_CLEAR_ALL */, 0, 0, 0);
    struct {
        uint32_t version;
        int pid;
    } header = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
    struct {
        uint32_t effective, permitted, inheritable;
    } data[2] = {{0, 0, 0}, {0, 0, 0}};
    return (int)syscall(SYS_capset, &header, data);
}

// Confines the calling thread for good, and so every child it starts from now on: no
// capabilities, no new privileges (set-user-ID bits and file capabilities stop working), the
// filter above, and, when `ruleset` is a Landlock ruleset (not -1), that ruleset. Call it only on a thread made for
// starting one child. 0, or -1 and errno at the step that failed.
static inline int dc_confine_calling_thread(int ruleset) {
    if (dc_drop_capabilities() != 0) return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    if (dc_install_child_filter((pid_t)syscall(SYS_gettid)) != 0) return -1;
    if (ruleset >= 0 && syscall(SYS_landlock_restrict_self, ruleset, 0U) != 0) return -1;
    return 0;
}

// posix_spawnattr_setflags' POSIX_SPAWN_SETSID (glibc 2.26), which glibc defines only under
// _GNU_SOURCE: the child starts a session of its own (setsid), so it has no controlling terminal
// and outlives the parent's process group and terminal.
#define DC_POSIX_SPAWN_SETSID 0x80

// Whether the file system that holds `fd` keeps its files in memory only (statfs(2)'s f_type:
// TMPFS_MAGIC 0x01021994 or RAMFS_MAGIC 0x858458f6, linux/magic.h): 1 when it does, 0 when it is
// anything else (a disk, a network file system), -1 and errno when fstatfs fails. A secret that
// must never reach persistent storage is written only where this says 1. f_type is compared as
// the 32-bit magic it is (its C type is signed and word-sized).
static inline int dc_fd_in_memory(int fd) {
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return -1;
    uint32_t type = (uint32_t)info.f_type;
    return type == 0x01021994u || type == 0x858458f6u ? 1 : 0;
}

#endif
