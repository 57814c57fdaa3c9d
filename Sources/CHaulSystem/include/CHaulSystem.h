#ifndef CHAUL_SYSTEM_H
#define CHAUL_SYSTEM_H

#include <stdint.h>

/// openat2(2): opens `path` relative to the folder `directory` with `flags` and `mode`, resolved as `resolve`
/// (`RESOLVE_*`) says. Returns the descriptor, or -1 with errno set: ENOSYS where the kernel (before 5.6) or a
/// seccomp filter does not offer it. glibc 2.36 has no wrapper and Swift cannot call the variadic syscall(2).
int haul_openat2(int directory, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve);

#endif
