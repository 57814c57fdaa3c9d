// powercut: a FUSE file system that loses, on command, what a disk would lose in a power cut.
//
//   powercut BACKING MOUNTPOINT --control FIFO [--image DIR] [--seed N] [--keep none|prefix|subset]
//            [--cut-at-write SUFFIX:N]
//
// Every operation is passed to BACKING (what programs see: the page cache). Beside it, the file system keeps what
// a disk would hold after a power cut (the durable state):
//   - a file's data and length become durable when the file is synced (fsync or fdatasync);
//   - a create, mkdir, link, symlink, rename, unlink or rmdir becomes durable when its folder is synced
//     (a rename across folders: each side with its own folder); a cut keeps a rename whole or loses it whole, as a
//     journaling file system commits it in one transaction.
// Until then each of them waits in a log, in the order it was made. A cut takes the file system's lock, so no
// operation is half done, and keeps of the log none of it, a random prefix, or a random subset (as CrashMonkey does),
// then writes the durable state to --image as a folder tree: what a disk would show after the machine came back. It
// comes when the line "cut" is written to the control FIFO; at the Nth write to a file whose name ends with SUFFIX;
// or, after the line "arm N" (answered by the file FIFO.armed), before the Nth change from then on (a create, write,
// truncate, rename, link, unlink or sync); "arm N SUFFIX" counts from the first change to a file whose name ends with
// SUFFIX. From then on every operation fails with EIO (a dead disk) until the file system is unmounted.
//
// Inode numbers are the file system's own and survive a cut: the image's `.powercut-nodes` file lists them, and a
// mount of that image reads it. Haul records a file's inode and compares it at the next start, as it would on a
// disk that came back from a power cut.
//
// The file system implements neither lseek (SEEK_HOLE sees no holes, as on many FUSE and network file systems) nor
// xattrs. It runs single-threaded; one lock also guards against the control thread.
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

// MARK: State

enum kind { K_FILE, K_DIR, K_LINK, K_SPECIAL };

struct entry {
    char *name;
    uint64_t node;
};

/// A file, folder, link or special file, named by the file system's own number.
struct node {
    uint64_t id;
    enum kind kind;
    mode_t mode;
    dev_t rdev;
    char *target;           // a link's target
    int has_durable;        // whether DURABLE/<id> holds the durable data (else the backing file still does)
    ino_t backing_ino;      // the backing file's inode while it has one (0 when none)
    struct entry *entries;  // a folder's durable entries
    size_t entry_count, entry_capacity;
};

enum op_kind { OP_WRITE, OP_TRUNCATE, OP_ADD, OP_REMOVE };

/// An operation not yet durable.
struct op {
    enum op_kind kind;
    uint64_t node;      // the file written or truncated; the folder of an entry
    off_t offset;       // a write's offset; a truncate's length
    size_t length;
    char *data;         // a write's bytes
    char *name;         // an entry's name
    uint64_t target;    // the node an added entry names
    int with_previous;  // kept or lost with the operation before it (the two halves of a rename)
};

/// An open file: the backing descriptor, and the node it was opened as (a file keeps its node when its last name
/// goes while it is open).
struct handle {
    int descriptor;
    uint64_t node;
};

static struct handle *handle_of(struct fuse_file_info *file) { return (struct handle *)(uintptr_t)file->fh; }

static char *backing, *durable_dir, *image_dir, *control_path, *cut_suffix;
static long cut_at_write = -1, suffix_writes = 0;
// Changes left until an armed cut ("arm N [SUFFIX]"), or 0; with a suffix, they count from the first change to a
// file whose name ends with it.
static long armed = 0;
static char armed_suffix[PATH_MAX];
static int armed_counts = 0;
static enum { KEEP_NONE, KEEP_PREFIX, KEEP_SUBSET } keep = KEEP_NONE;
static unsigned seed = 1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int dead = 0;

static struct node **nodes;
static size_t node_capacity;
static uint64_t next_id = 2;
static struct op *log_ops;
static size_t log_count, log_capacity;
static uint64_t synced_files, synced_folders;

static void fail(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    fprintf(stderr, "powercut: ");
    vfprintf(stderr, format, arguments);
    fprintf(stderr, "\n");
    va_end(arguments);
    exit(1);
}

static void *grow(void *pointer, size_t *capacity, size_t needed, size_t size) {
    if (needed <= *capacity) return pointer;
    size_t next = *capacity ? *capacity * 2 : 64;
    while (next < needed) next *= 2;
    pointer = realloc(pointer, next * size);
    if (!pointer) fail("out of memory");
    memset((char *)pointer + *capacity * size, 0, (next - *capacity) * size);
    *capacity = next;
    return pointer;
}

static struct node *node_of(uint64_t id) { return id < node_capacity ? nodes[id] : NULL; }

static struct node *make_node(uint64_t id, enum kind kind, mode_t mode) {
    nodes = grow(nodes, &node_capacity, id + 1, sizeof *nodes);
    struct node *node = calloc(1, sizeof *node);
    node->id = id;
    node->kind = kind;
    node->mode = mode;
    nodes[id] = node;
    if (id >= next_id) next_id = id + 1;
    return node;
}

static enum kind kind_of(mode_t mode) {
    if (S_ISREG(mode)) return K_FILE;
    if (S_ISDIR(mode)) return K_DIR;
    if (S_ISLNK(mode)) return K_LINK;
    return K_SPECIAL;
}

static void full_path(char *out, const char *path) { snprintf(out, PATH_MAX, "%s%s", backing, path); }

static void durable_path(char *out, uint64_t id) { snprintf(out, PATH_MAX, "%s/%llu", durable_dir, (unsigned long long)id); }

/// The node of a backing inode, or 0.
static uint64_t node_with_ino(ino_t ino) {
    for (size_t i = 0; i < node_capacity; i++) {
        if (nodes[i] && nodes[i]->backing_ino == ino) return i;
    }
    return 0;
}

/// The node of the backing entry at `path`, or 0.
static uint64_t node_at(const char *path) {
    char full[PATH_MAX];
    full_path(full, path);
    struct stat info;
    if (lstat(full, &info) != 0) return 0;
    return node_with_ino(info.st_ino);
}

/// A copy of `from` at `to` (the whole file).
static int copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY);
    if (in < 0) return -errno;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0) {
        close(in);
        return -errno;
    }
    char buffer[1 << 16];
    ssize_t count;
    while ((count = read(in, buffer, sizeof buffer)) > 0) {
        if (write(out, buffer, count) != count) fail("cannot copy %s: %s", from, strerror(errno));
    }
    close(in);
    close(out);
    return 0;
}

/// Makes sure DURABLE/<id> holds the file's durable data before its backing file changes or loses its last name:
/// until its first change since the mount, the backing file is the durable data.
static void keep_durable(struct node *node, const char *backing_path) {
    if (node->kind != K_FILE || node->has_durable) return;
    char to[PATH_MAX];
    durable_path(to, node->id);
    if (backing_path) {
        if (copy_file(backing_path, to) != 0) fail("cannot keep %s: %s", backing_path, strerror(errno));
    } else {
        int descriptor = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (descriptor < 0) fail("cannot create %s: %s", to, strerror(errno));
        close(descriptor);
    }
    node->has_durable = 1;
}

static void log_op(struct op op) {
    log_ops = grow(log_ops, &log_capacity, log_count + 1, sizeof *log_ops);
    log_ops[log_count++] = op;
}

static void log_entry(enum op_kind kind, uint64_t folder, const char *name, uint64_t target) {
    log_op((struct op){.kind = kind, .node = folder, .name = strdup(name), .target = target});
}

/// Marks the last entry logged as the second half of the one before it: a cut keeps both or neither.
static void join_previous(void) { log_ops[log_count - 1].with_previous = 1; }

/// The folder node and the last name of `path`.
static uint64_t parent_of(const char *path, const char **name) {
    const char *slash = strrchr(path, '/');
    *name = slash + 1;
    if (slash == path) return 1;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    return node_at(parent);
}

// MARK: Making operations durable

static void durable_remove(struct node *folder, const char *name) {
    for (size_t i = 0; i < folder->entry_count; i++) {
        if (strcmp(folder->entries[i].name, name) == 0) {
            free(folder->entries[i].name);
            folder->entries[i] = folder->entries[--folder->entry_count];
            return;
        }
    }
}

static void durable_add(struct node *folder, const char *name, uint64_t target) {
    durable_remove(folder, name);
    folder->entries = grow(folder->entries, &folder->entry_capacity, folder->entry_count + 1, sizeof *folder->entries);
    folder->entries[folder->entry_count++] = (struct entry){strdup(name), target};
}

/// Applies one logged operation to the durable state.
static void apply(struct op *op) {
    struct node *node = node_of(op->node);
    if (!node) return;
    char path[PATH_MAX];
    switch (op->kind) {
    case OP_WRITE:
    case OP_TRUNCATE: {
        keep_durable(node, NULL);
        durable_path(path, node->id);
        int descriptor = open(path, O_WRONLY);
        if (descriptor < 0) fail("cannot open %s: %s", path, strerror(errno));
        if (op->kind == OP_WRITE) {
            if (pwrite(descriptor, op->data, op->length, op->offset) != (ssize_t)op->length) fail("cannot write %s", path);
        } else if (ftruncate(descriptor, op->offset) != 0) {
            fail("cannot truncate %s", path);
        }
        close(descriptor);
        break;
    }
    case OP_ADD: durable_add(node, op->name, op->target); break;
    case OP_REMOVE: durable_remove(node, op->name); break;
    }
}

static void drop(struct op *op) {
    free(op->data);
    free(op->name);
}

/// Makes durable, in order, the logged operations `matches` selects, and takes them out of the log.
static void settle(int (*matches)(struct op *, uint64_t), uint64_t node) {
    size_t kept = 0;
    int previous_settled = 0;
    for (size_t i = 0; i < log_count; i++) {
        if (matches(&log_ops[i], node)) {
            apply(&log_ops[i]);
            drop(&log_ops[i]);
            previous_settled = 1;
        } else {
            // The other half of a rename across folders, settled with its own folder: this half stands alone.
            if (previous_settled) log_ops[i].with_previous = 0;
            log_ops[kept++] = log_ops[i];
            previous_settled = 0;
        }
    }
    log_count = kept;
}

static int is_data_of(struct op *op, uint64_t node) {
    return (op->kind == OP_WRITE || op->kind == OP_TRUNCATE) && op->node == node;
}

static int is_entry_of(struct op *op, uint64_t node) {
    return (op->kind == OP_ADD || op->kind == OP_REMOVE) && op->node == node;
}

// MARK: The cut

static FILE *nodes_file;
/// The first image path of each node written, so that a second name of a file is a hard link to it.
static char **image_paths;
/// Backing paths by backing inode, for files unchanged since the mount (their backing file is their durable data).
static struct backing_file {
    ino_t ino;
    char *path;
} *backing_files;
static size_t backing_count, backing_capacity;

static void list_backing(const char *folder) {
    DIR *items = opendir(folder);
    if (!items) return;
    struct dirent *item;
    while ((item = readdir(items))) {
        if (strcmp(item->d_name, ".") == 0 || strcmp(item->d_name, "..") == 0) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", folder, item->d_name);
        struct stat info;
        if (lstat(path, &info) != 0) continue;
        if (S_ISREG(info.st_mode)) {
            backing_files = grow(backing_files, &backing_capacity, backing_count + 1, sizeof *backing_files);
            backing_files[backing_count++] = (struct backing_file){info.st_ino, strdup(path)};
        } else if (S_ISDIR(info.st_mode)) {
            list_backing(path);
        }
    }
    closedir(items);
}

static const char *backing_path_of(ino_t ino) {
    for (size_t i = 0; i < backing_count; i++) {
        if (backing_files[i].ino == ino) return backing_files[i].path;
    }
    return NULL;
}

/// Writes the durable tree of `folder` at `path` in the image, and each entry's node number to the node list.
static void write_tree(struct node *folder, const char *path, const char *relative) {
    for (size_t i = 0; i < folder->entry_count; i++) {
        struct entry *entry = &folder->entries[i];
        struct node *node = node_of(entry->node);
        if (!node) continue;
        char to[PATH_MAX], name[PATH_MAX];
        snprintf(to, sizeof to, "%s/%s", path, entry->name);
        snprintf(name, sizeof name, "%s/%s", relative, entry->name);
        if (image_paths[node->id]) {
            // A second name: a folder has one (a rename whose old side was not synced leaves the first).
            if (node->kind == K_DIR) continue;
            if (link(image_paths[node->id], to) != 0) fail("cannot link %s: %s", to, strerror(errno));
            fprintf(nodes_file, "%llu\t%s\n", (unsigned long long)node->id, name);
            continue;
        }
        image_paths[node->id] = strdup(to);
        fprintf(nodes_file, "%llu\t%s\n", (unsigned long long)node->id, name);
        switch (node->kind) {
        case K_DIR:
            if (mkdir(to, node->mode & 07777) != 0) fail("cannot make %s: %s", to, strerror(errno));
            write_tree(node, to, name);
            break;
        case K_FILE: {
            char from[PATH_MAX];
            if (node->has_durable) {
                durable_path(from, node->id);
            } else {
                const char *found = node->backing_ino ? backing_path_of(node->backing_ino) : NULL;
                if (!found) fail("no data for node %llu (%s)", (unsigned long long)node->id, name);
                snprintf(from, sizeof from, "%s", found);
            }
            if (copy_file(from, to) != 0) fail("cannot copy %s to %s", from, to);
            chmod(to, node->mode & 07777);
            break;
        }
        case K_LINK:
            if (symlink(node->target, to) != 0) fail("cannot make link %s", to);
            break;
        case K_SPECIAL:
            if (mknod(to, node->mode, node->rdev) != 0) fail("cannot make %s", to);
            break;
        }
    }
}

/// The power cut: keeps none, a prefix or a subset of the log, and writes the durable state to the image.
static void cut(const char *why) {
    if (dead) return;
    dead = 1;
    srand(seed);
    size_t survivors = 0;
    // A rename is kept or lost whole, as a journaling file system commits it in one transaction.
    if (keep == KEEP_PREFIX && log_count) {
        survivors = (size_t)rand() % (log_count + 1);
        while (survivors < log_count && log_ops[survivors].with_previous) survivors++;
        for (size_t i = 0; i < survivors; i++) apply(&log_ops[i]);
    } else if (keep == KEEP_SUBSET) {
        int kept = 0;
        for (size_t i = 0; i < log_count; i++) {
            if (!log_ops[i].with_previous) kept = rand() % 2;
            if (kept) {
                apply(&log_ops[i]);
                survivors++;
            }
        }
    }
    fprintf(stderr, "powercut: cut (%s): %zu operations were not durable, %zu of them kept; %llu file syncs, %llu folder syncs\n",
            why, log_count, survivors, (unsigned long long)synced_files, (unsigned long long)synced_folders);
    if (!image_dir) return;
    if (mkdir(image_dir, 0755) != 0 && errno != EEXIST) fail("cannot make %s", image_dir);
    char list[PATH_MAX];
    snprintf(list, sizeof list, "%s.nodes", image_dir);
    nodes_file = fopen(list, "w");
    if (!nodes_file) fail("cannot write %s", list);
    image_paths = calloc(next_id + 1, sizeof *image_paths);
    list_backing(backing);
    write_tree(node_of(1), image_dir, "");
    fclose(nodes_file);
    // Told through a file beside the FIFO, once the image is complete.
    char done[PATH_MAX];
    snprintf(done, sizeof done, "%s.done", control_path);
    FILE *file = fopen(done, "w");
    if (file) fclose(file);
}

static void *control_thread(void *unused) {
    (void)unused;
    for (;;) {
        FILE *control = fopen(control_path, "r");
        if (!control) fail("cannot open %s", control_path);
        char line[64];
        while (fgets(line, sizeof line, control)) {
            if (strncmp(line, "cut", 3) == 0) {
                pthread_mutex_lock(&lock);
                cut("asked");
                pthread_mutex_unlock(&lock);
            } else if (strncmp(line, "arm ", 4) == 0) {
                pthread_mutex_lock(&lock);
                char *rest;
                armed = strtol(line + 4, &rest, 10);
                armed_suffix[0] = 0;
                sscanf(rest, " %4095s", armed_suffix);
                armed_counts = armed_suffix[0] == 0;
                pthread_mutex_unlock(&lock);
                // Told through a file beside the FIFO: the changes after it count.
                char told[PATH_MAX];
                snprintf(told, sizeof told, "%s.armed", control_path);
                FILE *file = fopen(told, "w");
                if (file) fclose(file);
            }
        }
        fclose(control);
    }
    return NULL;
}

// MARK: Operations

#define ENTER()                    \
    pthread_mutex_lock(&lock);     \
    if (dead) {                    \
        pthread_mutex_unlock(&lock); \
        return -EIO;               \
    }

static int ends_with(const char *path, const char *suffix) {
    if (!path) return 0;
    size_t length = strlen(path), suffix_length = strlen(suffix);
    return length >= suffix_length && strcmp(path + length - suffix_length, suffix) == 0;
}

// In an operation that changes the file system, after ENTER: the armed cut, before the change is made. A change
// counts from the first change to a file of the armed suffix, under `path` or, for a rename, `other`.
#define CHANGE_OF(what, path, other)                                                                            \
    if (armed > 0 &&                                                                                            \
        (armed_counts || (armed_counts = ends_with(path, armed_suffix) || ends_with(other, armed_suffix))) && \
        --armed == 0) {                                                                                         \
        char armed_why[2 * PATH_MAX + 64];                                                                      \
        snprintf(armed_why, sizeof armed_why, "armed, before the %s of %s%s%s", what, path ? path : "?",         \
                 other ? " to " : "", other ? other : "");                                                      \
        cut(armed_why);                                                                                         \
        LEAVE(-EIO);                                                                                            \
    }
#define CHANGE(what, path) CHANGE_OF(what, path, NULL)
#define LEAVE(result)              \
    do {                           \
        int leave_result = (result); \
        pthread_mutex_unlock(&lock); \
        return leave_result;       \
    } while (0)

static int fs_getattr(const char *path, struct stat *info, struct fuse_file_info *file) {
    (void)file;
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    if (lstat(full, info) != 0) LEAVE(-errno);
    uint64_t node = strcmp(path, "/") == 0 ? 1 : node_with_ino(info->st_ino);
    info->st_ino = node ? node : info->st_ino + (1ull << 40);
    LEAVE(0);
}

static int fs_readlink(const char *path, char *buffer, size_t size) {
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    ssize_t count = readlink(full, buffer, size - 1);
    if (count < 0) LEAVE(-errno);
    buffer[count] = 0;
    LEAVE(0);
}

static int fs_readdir(const char *path, void *buffer, fuse_fill_dir_t fill, off_t offset, struct fuse_file_info *file,
                      enum fuse_readdir_flags flags) {
    (void)offset, (void)file, (void)flags;
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    DIR *folder = opendir(full);
    if (!folder) LEAVE(-errno);
    struct dirent *item;
    while ((item = readdir(folder))) {
        struct stat info = {0};
        uint64_t node = node_with_ino(item->d_ino);
        info.st_ino = node ? node : item->d_ino;
        info.st_mode = (mode_t)item->d_type << 12;
        if (fill(buffer, item->d_name, &info, 0, 0)) break;
    }
    closedir(folder);
    LEAVE(0);
}

/// A new node for the backing entry just made at `path`, and its entry logged in its folder.
static int made(const char *path) {
    char full[PATH_MAX];
    full_path(full, path);
    struct stat info;
    if (lstat(full, &info) != 0) return -errno;
    struct node *node = make_node(next_id, kind_of(info.st_mode), info.st_mode);
    node->backing_ino = info.st_ino;
    node->rdev = info.st_rdev;
    if (node->kind == K_FILE) keep_durable(node, NULL);
    if (node->kind == K_LINK) {
        char target[PATH_MAX];
        ssize_t count = readlink(full, target, sizeof target - 1);
        target[count < 0 ? 0 : count] = 0;
        node->target = strdup(target);
    }
    const char *name;
    uint64_t folder = parent_of(path, &name);
    log_entry(OP_ADD, folder, name, node->id);
    return 0;
}

/// Before the backing entry at `path` goes (an unlink, or a rename over it): its data is kept when it was its last
/// name, since the durable state may still name it.
static void before_losing(const char *path) {
    char full[PATH_MAX];
    full_path(full, path);
    struct stat info;
    if (lstat(full, &info) != 0) return;
    struct node *node = node_of(node_with_ino(info.st_ino));
    if (!node) return;
    if (node->kind == K_FILE) keep_durable(node, full);
    if (info.st_nlink <= 1 || node->kind == K_DIR) node->backing_ino = 0;
}

static int fs_mknod(const char *path, mode_t mode, dev_t rdev) {
    ENTER();
    CHANGE("create", path);
    char full[PATH_MAX];
    full_path(full, path);
    if (mknod(full, mode, rdev) != 0) LEAVE(-errno);
    LEAVE(made(path));
}

static int fs_mkdir(const char *path, mode_t mode) {
    ENTER();
    CHANGE("mkdir", path);
    char full[PATH_MAX];
    full_path(full, path);
    if (mkdir(full, mode) != 0) LEAVE(-errno);
    LEAVE(made(path));
}

static int fs_symlink(const char *target, const char *path) {
    ENTER();
    CHANGE("symlink", path);
    char full[PATH_MAX];
    full_path(full, path);
    if (symlink(target, full) != 0) LEAVE(-errno);
    LEAVE(made(path));
}

static int fs_unlink(const char *path) {
    ENTER();
    CHANGE("unlink", path);
    char full[PATH_MAX];
    full_path(full, path);
    const char *name;
    uint64_t folder = parent_of(path, &name);
    before_losing(path);
    if (unlink(full) != 0) LEAVE(-errno);
    log_entry(OP_REMOVE, folder, name, 0);
    LEAVE(0);
}

static int fs_rmdir(const char *path) {
    ENTER();
    CHANGE("rmdir", path);
    char full[PATH_MAX];
    full_path(full, path);
    const char *name;
    uint64_t folder = parent_of(path, &name);
    uint64_t node = node_at(path);
    if (rmdir(full) != 0) LEAVE(-errno);
    if (node_of(node)) node_of(node)->backing_ino = 0;
    log_entry(OP_REMOVE, folder, name, 0);
    LEAVE(0);
}

static int fs_rename(const char *from, const char *to, unsigned int flags) {
    ENTER();
    CHANGE_OF("rename", from, to);
    char full_from[PATH_MAX], full_to[PATH_MAX];
    full_path(full_from, from);
    full_path(full_to, to);
    uint64_t node = node_at(from);
    uint64_t replaced = (flags & RENAME_EXCHANGE) ? node_at(to) : 0;
    if (!(flags & (RENAME_NOREPLACE | RENAME_EXCHANGE))) before_losing(to);
    if (renameat2(AT_FDCWD, full_from, AT_FDCWD, full_to, flags) != 0) LEAVE(-errno);
    const char *from_name, *to_name;
    uint64_t from_folder = parent_of(from, &from_name);
    uint64_t to_folder = parent_of(to, &to_name);
    if (flags & RENAME_EXCHANGE) {
        log_entry(OP_ADD, from_folder, from_name, replaced);
    } else {
        log_entry(OP_REMOVE, from_folder, from_name, 0);
    }
    log_entry(OP_ADD, to_folder, to_name, node);
    join_previous();
    LEAVE(0);
}

static int fs_link(const char *from, const char *to) {
    ENTER();
    CHANGE("link", to);
    char full_from[PATH_MAX], full_to[PATH_MAX];
    full_path(full_from, from);
    full_path(full_to, to);
    if (link(full_from, full_to) != 0) LEAVE(-errno);
    const char *name;
    uint64_t folder = parent_of(to, &name);
    log_entry(OP_ADD, folder, name, node_at(to));
    LEAVE(0);
}

static int fs_chmod(const char *path, mode_t mode, struct fuse_file_info *file) {
    (void)file;
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    if (chmod(full, mode) != 0) LEAVE(-errno);
    struct node *node = node_of(node_at(path));
    if (node) node->mode = (node->mode & ~07777) | (mode & 07777);
    LEAVE(0);
}

static int fs_chown(const char *path, uid_t user, gid_t group, struct fuse_file_info *file) {
    (void)file;
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    if (lchown(full, user, group) != 0) LEAVE(-errno);
    LEAVE(0);
}

static void log_truncate(uint64_t node, off_t length) {
    log_op((struct op){.kind = OP_TRUNCATE, .node = node, .offset = length});
}

static int fs_truncate(const char *path, off_t length, struct fuse_file_info *file) {
    ENTER();
    CHANGE("truncate", path);
    int result;
    uint64_t node;
    if (file) {
        node = handle_of(file)->node;
        if (node_of(node) && !node_of(node)->has_durable) {
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", handle_of(file)->descriptor);
            keep_durable(node_of(node), proc);
        }
        result = ftruncate(handle_of(file)->descriptor, length);
    } else {
        char full[PATH_MAX];
        full_path(full, path);
        node = node_at(path);
        if (node_of(node)) keep_durable(node_of(node), full);
        result = truncate(full, length);
    }
    if (result != 0) LEAVE(-errno);
    if (node) log_truncate(node, length);
    LEAVE(0);
}

static int fs_utimens(const char *path, const struct timespec times[2], struct fuse_file_info *file) {
    (void)file;
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    if (utimensat(AT_FDCWD, full, times, AT_SYMLINK_NOFOLLOW) != 0) LEAVE(-errno);
    LEAVE(0);
}

static int opened(const char *path, struct fuse_file_info *file, int descriptor, int created) {
    if (created) {
        int result = made(path);
        if (result != 0) {
            close(descriptor);
            return result;
        }
    }
    struct stat info;
    fstat(descriptor, &info);
    uint64_t id = node_with_ino(info.st_ino);
    if (!id) {
        struct node *node = make_node(next_id, kind_of(info.st_mode), info.st_mode);
        node->backing_ino = info.st_ino;
        id = node->id;
    }
    struct handle *handle = malloc(sizeof *handle);
    *handle = (struct handle){descriptor, id};
    file->fh = (uint64_t)(uintptr_t)handle;
    return 0;
}

static int fs_open(const char *path, struct fuse_file_info *file) {
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    uint64_t node = node_at(path);
    int truncates = (file->flags & O_TRUNC) && (file->flags & O_ACCMODE) != O_RDONLY;
    if (truncates && node_of(node)) keep_durable(node_of(node), full);
    int descriptor = open(full, file->flags & ~(O_CREAT | O_EXCL));
    if (descriptor < 0) LEAVE(-errno);
    if (truncates && node) log_truncate(node, 0);
    LEAVE(opened(path, file, descriptor, 0));
}

static int fs_create(const char *path, mode_t mode, struct fuse_file_info *file) {
    ENTER();
    CHANGE("create", path);
    char full[PATH_MAX];
    full_path(full, path);
    uint64_t existing = node_at(path);
    if (existing && (file->flags & O_TRUNC) && node_of(existing)) keep_durable(node_of(existing), full);
    int descriptor = open(full, file->flags | O_CREAT, mode);
    if (descriptor < 0) LEAVE(-errno);
    if (existing) {
        if (file->flags & O_TRUNC) log_truncate(existing, 0);
        LEAVE(opened(path, file, descriptor, 0));
    }
    LEAVE(opened(path, file, descriptor, 1));
}

static int fs_read(const char *path, char *buffer, size_t size, off_t offset, struct fuse_file_info *file) {
    (void)path;
    ENTER();
    ssize_t count = pread(handle_of(file)->descriptor, buffer, size, offset);
    LEAVE(count < 0 ? -errno : (int)count);
}

static int fs_write(const char *path, const char *buffer, size_t size, off_t offset, struct fuse_file_info *file) {
    ENTER();
    CHANGE("write", path);
    if (cut_suffix && ends_with(path, cut_suffix) && ++suffix_writes == cut_at_write) {
        cut("the chosen write");
        LEAVE(-EIO);
    }
    struct handle *handle = handle_of(file);
    struct node *node = node_of(handle->node);
    if (node && !node->has_durable) {
        // The first change since the mount: the backing file, as it is now, is the durable data.
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", handle->descriptor);
        keep_durable(node, proc);
    }
    ssize_t count = pwrite(handle->descriptor, buffer, size, offset);
    if (count < 0) LEAVE(-errno);
    if (node) {
        char *data = malloc((size_t)count);
        memcpy(data, buffer, (size_t)count);
        log_op((struct op){.kind = OP_WRITE, .node = node->id, .offset = offset, .length = (size_t)count, .data = data});
    }
    LEAVE((int)count);
}

static int fs_statfs(const char *path, struct statvfs *info) {
    (void)path;
    ENTER();
    if (statvfs(backing, info) != 0) LEAVE(-errno);
    LEAVE(0);
}

static int fs_release(const char *path, struct fuse_file_info *file) {
    (void)path;
    // Even on a dead disk: the descriptor is the file system's own.
    close(handle_of(file)->descriptor);
    free(handle_of(file));
    return 0;
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *file) {
    (void)path, (void)datasync;
    ENTER();
    CHANGE("fsync", path);
    uint64_t node = handle_of(file)->node;
    if (node) settle(is_data_of, node);
    synced_files++;
    LEAVE(0);
}

static int fs_opendir(const char *path, struct fuse_file_info *file) {
    ENTER();
    char full[PATH_MAX];
    full_path(full, path);
    int descriptor = open(full, O_RDONLY | O_DIRECTORY);
    if (descriptor < 0) LEAVE(-errno);
    file->fh = (uint64_t)descriptor;
    LEAVE(0);
}

static int fs_releasedir(const char *path, struct fuse_file_info *file) {
    (void)path;
    close((int)file->fh);
    return 0;
}

static int fs_fsyncdir(const char *path, int datasync, struct fuse_file_info *file) {
    (void)datasync, (void)file;
    ENTER();
    CHANGE("folder sync", path);
    uint64_t node = strcmp(path, "/") == 0 ? 1 : node_at(path);
    if (node) settle(is_entry_of, node);
    synced_folders++;
    LEAVE(0);
}

static int fs_fallocate(const char *path, int mode, off_t offset, off_t length, struct fuse_file_info *file) {
    (void)path;
    ENTER();
    CHANGE("fallocate", path);
    if (mode != 0) LEAVE(-EOPNOTSUPP);
    struct stat before;
    int descriptor = handle_of(file)->descriptor;
    fstat(descriptor, &before);
    uint64_t node = handle_of(file)->node;
    if (node_of(node) && !node_of(node)->has_durable) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", descriptor);
        keep_durable(node_of(node), proc);
    }
    if (fallocate(descriptor, 0, offset, length) != 0) LEAVE(-errno);
    if (node && offset + length > before.st_size) log_truncate(node, offset + length);
    LEAVE(0);
}

static void *fs_init(struct fuse_conn_info *connection, struct fuse_config *config) {
    (void)connection;
    config->use_ino = 1;
    config->entry_timeout = 0;
    config->attr_timeout = 0;
    config->negative_timeout = 0;
    return NULL;
}

static const struct fuse_operations operations = {
    .init = fs_init,
    .getattr = fs_getattr,
    .readlink = fs_readlink,
    .readdir = fs_readdir,
    .mknod = fs_mknod,
    .mkdir = fs_mkdir,
    .symlink = fs_symlink,
    .unlink = fs_unlink,
    .rmdir = fs_rmdir,
    .rename = fs_rename,
    .link = fs_link,
    .chmod = fs_chmod,
    .chown = fs_chown,
    .truncate = fs_truncate,
    .utimens = fs_utimens,
    .open = fs_open,
    .create = fs_create,
    .read = fs_read,
    .write = fs_write,
    .statfs = fs_statfs,
    .release = fs_release,
    .fsync = fs_fsync,
    .opendir = fs_opendir,
    .releasedir = fs_releasedir,
    .fsyncdir = fs_fsyncdir,
    .fallocate = fs_fallocate,
};

// MARK: Start

/// Node numbers an earlier cut's image listed, by path.
static struct listed {
    char *path;
    uint64_t id;
} *listed;
static size_t listed_count, listed_capacity;

static uint64_t listed_id(const char *path) {
    for (size_t i = 0; i < listed_count; i++) {
        if (strcmp(listed[i].path, path) == 0) return listed[i].id;
    }
    return 0;
}

/// Adds what the backing folder at `relative` holds to the durable state: at the mount, the disk holds exactly it.
static void scan_folder(uint64_t folder, const char *relative) {
    char full[PATH_MAX];
    full_path(full, relative[0] ? relative : "/");
    DIR *items = opendir(full);
    if (!items) fail("cannot read %s", full);
    struct dirent *item;
    while ((item = readdir(items))) {
        if (strcmp(item->d_name, ".") == 0 || strcmp(item->d_name, "..") == 0) continue;
        char path[PATH_MAX], item_full[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", relative, item->d_name);
        full_path(item_full, path);
        struct stat info;
        if (lstat(item_full, &info) != 0) continue;
        uint64_t id = node_with_ino(info.st_ino);  // a second name of a file already seen
        if (!id) {
            id = listed_id(path);
            if (!id || node_of(id)) id = next_id;
            struct node *node = make_node(id, kind_of(info.st_mode), info.st_mode);
            node->backing_ino = info.st_ino;
            node->rdev = info.st_rdev;
            if (node->kind == K_LINK) {
                char target[PATH_MAX];
                ssize_t count = readlink(item_full, target, sizeof target - 1);
                target[count < 0 ? 0 : count] = 0;
                node->target = strdup(target);
            }
            if (node->kind == K_DIR) scan_folder(id, path);
        }
        durable_add(node_of(folder), item->d_name, id);
    }
    closedir(items);
}

/// Reads the backing tree as the durable state, with the node numbers an earlier cut's image listed.
static void scan(const char *list) {
    struct stat root;
    if (stat(backing, &root) != 0) fail("cannot read %s", backing);
    make_node(1, K_DIR, root.st_mode)->backing_ino = root.st_ino;
    FILE *file = list ? fopen(list, "r") : NULL;
    if (list && !file) fail("cannot read %s", list);
    char line[PATH_MAX + 32];
    while (file && fgets(line, sizeof line, file)) {
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        char *path = tab + 1;
        path[strcspn(path, "\n")] = 0;
        listed = grow(listed, &listed_capacity, listed_count + 1, sizeof *listed);
        listed[listed_count] = (struct listed){strdup(path), strtoull(line, NULL, 10)};
        if (listed[listed_count].id >= next_id) next_id = listed[listed_count].id + 1;
        listed_count++;
    }
    if (file) fclose(file);
    scan_folder(1, "");
}

static char *absolute(const char *path) {
    if (path[0] == '/') return strdup(path);
    char here[PATH_MAX], *joined = malloc(PATH_MAX * 2);
    if (!getcwd(here, sizeof here)) fail("cannot read the working folder");
    snprintf(joined, PATH_MAX * 2, "%s/%s", here, path);
    return joined;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: powercut BACKING MOUNTPOINT --control FIFO [--image DIR] [--seed N] "
                        "[--keep none|prefix|subset] [--cut-at-write SUFFIX:N] [--nodes FILE] [-d]\n");
        return 2;
    }
    backing = realpath(argv[1], NULL);
    if (!backing) fail("no folder %s", argv[1]);
    const char *mountpoint = argv[2];
    char *nodes_list = NULL;
    int debug = 0;
    for (int i = 3; i < argc; i++) {
        const char *flag = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "-d") == 0) {
            debug = 1;
            continue;
        }
        if (!value) fail("%s needs a value", flag);
        i++;
        if (strcmp(flag, "--control") == 0) {
            control_path = strdup(value);
        } else if (strcmp(flag, "--image") == 0) {
            image_dir = strdup(value);
        } else if (strcmp(flag, "--seed") == 0) {
            seed = (unsigned)strtoul(value, NULL, 10);
        } else if (strcmp(flag, "--nodes") == 0) {
            nodes_list = strdup(value);
        } else if (strcmp(flag, "--keep") == 0) {
            if (strcmp(value, "none") == 0) keep = KEEP_NONE;
            else if (strcmp(value, "prefix") == 0) keep = KEEP_PREFIX;
            else if (strcmp(value, "subset") == 0) keep = KEEP_SUBSET;
            else fail("--keep takes none, prefix or subset, not %s", value);
        } else if (strcmp(flag, "--cut-at-write") == 0) {
            const char *colon = strrchr(value, ':');
            if (!colon) fail("--cut-at-write takes SUFFIX:N");
            cut_suffix = strndup(value, (size_t)(colon - value));
            cut_at_write = strtol(colon + 1, NULL, 10);
        } else {
            fail("unknown flag %s", flag);
        }
    }
    if (!control_path) fail("--control FIFO is required");
    // Absolute: libfuse leaves the working folder.
    control_path = absolute(control_path);
    if (image_dir) image_dir = absolute(image_dir);
    if (nodes_list) nodes_list = absolute(nodes_list);
    char durable[PATH_MAX];
    snprintf(durable, sizeof durable, "%s.durable", backing);
    durable_dir = strdup(durable);
    if (mkdir(durable_dir, 0700) != 0 && errno != EEXIST) fail("cannot make %s", durable_dir);
    scan(nodes_list);
    pthread_t thread;
    pthread_create(&thread, NULL, control_thread, NULL);
    char *fuse_argv[] = {argv[0], (char *)mountpoint, "-f", "-s", "-o", "allow_other,default_permissions",
                         debug ? "-d" : NULL, NULL};
    int fuse_argc = debug ? 7 : 6;
    return fuse_main(fuse_argc, fuse_argv, &operations, NULL);
}
