#ifndef CHAUL_SYSTEM_H
#define CHAUL_SYSTEM_H

#include <spawn.h>
#include <stdint.h>

/// openat2(2): opens `path` relative to the folder `directory` with `flags` and `mode`, resolved as `resolve`
/// (`RESOLVE_*`) says. Returns the descriptor, or -1 with errno set: ENOSYS where the kernel (before 5.6) or a
/// seccomp filter does not offer it. glibc 2.36 has no wrapper and Swift cannot call the variadic syscall(2).
int haul_openat2(int directory, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve);

/// copy_file_range(2): copies `length` bytes of `source` from `source_offset` to `target` at `target_offset`, in the
/// kernel (a reflink or a server-side copy where the file system can). Returns the bytes copied (fewer at the end of
/// `source`), or -1 with errno set (EXDEV, ENOSYS, EINVAL where it cannot: the caller copies by reading). Swift's Glibc
/// module does not import it (it needs `_GNU_SOURCE`).
int64_t haul_copy_file_range(int source, int64_t source_offset, int target, int64_t target_offset, uint64_t length);

/// pipe2(2) with O_CLOEXEC: both ends close on exec, from the start (a child spawned meanwhile by another thread
/// never inherits them). Swift's Glibc module does not import pipe2 (it needs `_GNU_SOURCE`).
int haul_pipe_cloexec(int fds[2]);

/// posix_spawn_file_actions_addclosefrom_np (glibc 2.34): the child closes every descriptor from `lowest` up before it
/// runs, whatever it inherited without close-on-exec (a parent's sockets, its lock). Needs `_GNU_SOURCE` too.
int haul_spawn_close_from(posix_spawn_file_actions_t *actions, int lowest);

#endif
