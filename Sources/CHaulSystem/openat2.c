#include "CHaulSystem.h"

#include <errno.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

// The kernel's `struct open_how` (linux/openat2.h), declared here so the build needs no kernel headers.
struct haul_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

int haul_openat2(int directory, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve) {
    struct haul_open_how how = {flags, mode, resolve};
    return (int)syscall(SYS_openat2, directory, path, &how, sizeof how);
}
#else
int haul_openat2(int directory, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve) {
    (void)directory;
    (void)path;
    (void)flags;
    (void)mode;
    (void)resolve;
    errno = ENOSYS;
    return -1;
}
#endif
