// The floor of the small-files comparison: what Haul's guarantees cost the disk alone, with no network, no HTTP and no
// state database. 1000 files of 64 KiB from 16 threads, as `haul get -j 16` writes them: each created exclusively as
// NAME.part, written, fsynced, moved to NAME without replacing anything (renameat2 RENAME_NOREPLACE), and its folder
// fsynced, one folder sync covering every rename made before it started (as Haul's FolderSyncs). curl does none of
// the syncs; this is what any tool that keeps Haul's promises pays before its first request.
//
// With `nosync` it writes and moves the files and syncs nothing: with THREADS 1, that is the page-cache writes alone,
// what every tool that saves the same 64 MiB pays, curl included.
//
//   cc -O2 -pthread -o floor bench/floor.c && ./floor DIR [THREADS] [nosync]
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

enum { FILES = 1000, MAX_THREADS = 64, SIZE = 64 * 1024 };

static const char *folder;
static int syncs = 1;
static char body[SIZE];
static int next_file;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

// Folder syncs shared as in Haul: tickets, and the newest ticket a finished sync covered.
static pthread_cond_t synced_changed = PTHREAD_COND_INITIALIZER;
static unsigned long requested, synced;
static int syncing;

static void fail(const char *what, const char *path) {
    fprintf(stderr, "floor: %s %s: ", what, path);
    perror(NULL);
    exit(1);
}

static void sync_folder(void) {
    pthread_mutex_lock(&lock);
    unsigned long ticket = ++requested;
    while (synced < ticket) {
        if (syncing) {
            pthread_cond_wait(&synced_changed, &lock);
            continue;
        }
        syncing = 1;
        unsigned long covered = requested;
        pthread_mutex_unlock(&lock);
        int directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (directory < 0 || fsync(directory) != 0) fail("cannot sync", folder);
        close(directory);
        pthread_mutex_lock(&lock);
        synced = covered;
        syncing = 0;
        pthread_cond_broadcast(&synced_changed);
    }
    pthread_mutex_unlock(&lock);
}

static void *worker(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&lock);
        int index = next_file++;
        pthread_mutex_unlock(&lock);
        if (index >= FILES) return NULL;
        char final[4096], part[sizeof final + 8];
        snprintf(final, sizeof final, "%s/f%04d.bin", folder, index);
        snprintf(part, sizeof part, "%s.part", final);
        int file = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (file < 0) fail("cannot create", part);
        if (pwrite(file, body, SIZE, 0) != SIZE) fail("cannot write", part);
        if (syncs && fsync(file) != 0) fail("cannot sync", part);
        close(file);
        if (syscall(SYS_renameat2, AT_FDCWD, part, AT_FDCWD, final, RENAME_NOREPLACE) != 0) fail("cannot move", part);
        if (syncs) sync_folder();
    }
}

int main(int argc, char **argv) {
    int threads = argc >= 3 ? atoi(argv[2]) : 16;
    if (argc < 2 || argc > 4 || threads < 1 || threads > MAX_THREADS || (argc == 4 && strcmp(argv[3], "nosync") != 0)) {
        fprintf(stderr, "usage: floor DIR [THREADS] [nosync]\n");
        return 2;
    }
    folder = argv[1];
    syncs = argc != 4;
    memset(body, 'h', sizeof body);
    pthread_t workers[MAX_THREADS];
    for (int i = 0; i < threads; i++) pthread_create(&workers[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(workers[i], NULL);
    return 0;
}
