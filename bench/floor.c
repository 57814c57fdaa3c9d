// The floor of the small-files comparison: what Haul's guarantees cost the disk alone, with no network, no HTTP and no
// state database. 1000 files of 64 KiB from 16 threads, as `haul get -j 16` writes them: each created exclusively as
// NAME.part, written, fsynced, moved to NAME without replacing anything (renameat2 RENAME_NOREPLACE), and its folder
// fsynced. curl does none of the syncs; this is what any tool that keeps Haul's promises pays before its first request.
//
//   cc -O2 -pthread -o floor bench/floor.c && ./floor DIR
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

enum { FILES = 1000, THREADS = 16, SIZE = 64 * 1024 };

static const char *folder;
static char body[SIZE];
static int next_file;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, const char *path) {
    fprintf(stderr, "floor: %s %s: ", what, path);
    perror(NULL);
    exit(1);
}

static void *worker(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&lock);
        int index = next_file++;
        pthread_mutex_unlock(&lock);
        if (index >= FILES) return NULL;
        char part[4096], final[4096];
        snprintf(final, sizeof final, "%s/f%04d.bin", folder, index);
        snprintf(part, sizeof part, "%s.part", final);
        int file = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (file < 0) fail("cannot create", part);
        if (pwrite(file, body, SIZE, 0) != SIZE) fail("cannot write", part);
        if (fsync(file) != 0) fail("cannot sync", part);
        close(file);
        if (syscall(SYS_renameat2, AT_FDCWD, part, AT_FDCWD, final, RENAME_NOREPLACE) != 0) fail("cannot move", part);
        int directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (directory < 0 || fsync(directory) != 0) fail("cannot sync", folder);
        close(directory);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: floor DIR\n");
        return 2;
    }
    folder = argv[1];
    memset(body, 'h', sizeof body);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    return 0;
}
