#define _GNU_SOURCE
#include "CHaulSystem.h"

#include <errno.h>
#include <unistd.h>

#if defined(__linux__)
int64_t haul_copy_file_range(int source, int64_t source_offset, int target, int64_t target_offset, uint64_t length) {
    off64_t from = source_offset;
    off64_t to = target_offset;
    return (int64_t)copy_file_range(source, &from, target, &to, (size_t)length, 0);
}
#else
int64_t haul_copy_file_range(int source, int64_t source_offset, int target, int64_t target_offset, uint64_t length) {
    (void)source;
    (void)source_offset;
    (void)target;
    (void)target_offset;
    (void)length;
    errno = ENOSYS;
    return -1;
}
#endif
