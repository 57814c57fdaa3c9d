// The daemon benchmark's client: drives one daemon (haul serve's REST API or aria2c's JSON-RPC) through one step and
// prints the step's wall time in seconds. A compiled client, so that the client is not what is measured: a Python
// client alone needs 1.4 s for 10,000 requests even against nginx serving a static file. haul's adds ask for the ids
// alone (Prefer: return=minimal), as aria2c answers an add with its gid.
//
//   rpcclient HOST PORT KIND SECRET add COUNT THREADS   COUNT paused downloads, one request each, from THREADS threads
//                                                       with a keep-alive connection each (file000000.bin ...)
//   rpcclient HOST PORT KIND SECRET batch FIRST COUNT   COUNT more in one request (haul: a JSON list; aria2c:
//                                                       system.multicall of aria2.addUri), from number FIRST
//   rpcclient HOST PORT KIND SECRET list COUNT          every download in one request (haul: GET /api/v1/downloads;
//                                                       aria2c: aria2.tellWaiting 0 COUNT+10); prints "SECONDS ID"
//                                                       with the first download's id, and fails unless COUNT are listed
//   rpcclient HOST PORT KIND SECRET read ID COUNT       one download read COUNT times on one connection (haul:
//                                                       GET /api/v1/downloads/ID; aria2c: aria2.tellStatus)
//
// KIND is haul (SECRET is the bearer token) or aria2 (SECRET is the RPC secret). The URLs point at a closed port:
// the downloads are added paused and never fetched. The body of every answer is read whole (Content-Length or
// chunked framing) before the clock stops. Exits 1 on any answer that is not 2xx, or that is an RPC error.
// Built by bench/daemon.sh with the system's cc.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *kind, *secret;
static int port, count, threads;
static volatile int failed;

static int is_haul(void) { return strcmp(kind, "haul") == 0; }

static double now(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec + (double)time.tv_nsec / 1e9;
}

static int connect_to(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((unsigned short)port);
    inet_pton(AF_INET, host, &address.sin_addr);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); exit(1); }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// A growable buffer holding what was read of one answer.
struct buffer { char *bytes; size_t used, size; };

static void reserve(struct buffer *buffer, size_t more) {
    if (buffer->used + more + 1 <= buffer->size) return;
    while (buffer->used + more + 1 > buffer->size) buffer->size = buffer->size ? buffer->size * 2 : 65536;
    buffer->bytes = realloc(buffer->bytes, buffer->size);
    if (!buffer->bytes) { perror("realloc"); exit(1); }
}

// Reads more of the answer; 0 at the end of the connection.
static int fill(int fd, struct buffer *buffer) {
    reserve(buffer, 65536);
    ssize_t got = read(fd, buffer->bytes + buffer->used, buffer->size - buffer->used - 1);
    if (got <= 0) return 0;
    buffer->used += (size_t)got;
    buffer->bytes[buffer->used] = 0;
    return 1;
}

// Writes all of a request.
static int send_all(int fd, const char *bytes, size_t length) {
    while (length > 0) {
        ssize_t wrote = write(fd, bytes, length);
        if (wrote <= 0) return 0;
        bytes += wrote;
        length -= (size_t)wrote;
    }
    return 1;
}

// Reads one answer whole into `buffer` and returns its status (-1 on a broken connection). `*body` points at the
// body (for a chunked one, its chunks' framing left in place: the steps only search it).
static int read_response(int fd, struct buffer *buffer, const char **body) {
    buffer->used = 0;
    reserve(buffer, 0);
    buffer->bytes[0] = 0;
    char *end;
    while (!(end = strstr(buffer->bytes, "\r\n\r\n"))) {
        if (!fill(fd, buffer)) return -1;
    }
    size_t head = (size_t)(end + 4 - buffer->bytes);
    int status = atoi(buffer->bytes + 9);
    long length = -1;
    int chunked = 0;
    for (char *line = buffer->bytes; line < end; line = strstr(line, "\r\n") + 2) {
        if (strncasecmp(line, "content-length:", 15) == 0) length = strtol(line + 15, NULL, 10);
        const char *word = strstr(line, "chunked");
        if (strncasecmp(line, "transfer-encoding:", 18) == 0 && word && word < strstr(line, "\r\n")) chunked = 1;
    }
    if (chunked) {
        // Enough for these answers: the last chunk is "0\r\n\r\n" at the end of what was read.
        while (buffer->used - head < 5 || memcmp(buffer->bytes + buffer->used - 5, "0\r\n\r\n", 5) != 0) {
            if (!fill(fd, buffer)) return -1;
        }
    } else if (length >= 0) {
        while (buffer->used - head < (size_t)length) {
            if (!fill(fd, buffer)) return -1;
        }
    }
    *body = buffer->bytes + head;
    return status;
}

// Sends one POST (body given) or GET (body NULL) and reads its answer; fails the run on a non-2xx or an RPC error.
static const char *exchange(int fd, const char *method, const char *path, const char *body, size_t length,
                            struct buffer *buffer) {
    char head[1024];
    int total = snprintf(head, sizeof head,
        "%s %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n%s", method, path, host, port, secret,
        body ? (is_haul() ? "Content-Type: application/json\r\nPrefer: return=minimal\r\n"
                          : "Content-Type: application/json\r\n") : "");
    if (body) total += snprintf(head + total, sizeof head - (size_t)total, "Content-Length: %zu\r\n", length);
    total += snprintf(head + total, sizeof head - (size_t)total, "\r\n");
    if (!send_all(fd, head, (size_t)total) || (body && !send_all(fd, body, length))) {
        fprintf(stderr, "rpcclient: %s %s: the connection broke\n", method, path);
        exit(1);
    }
    const char *answer;
    int status = read_response(fd, buffer, &answer);
    if (status < 200 || status > 299 || (!is_haul() && strstr(answer, "\"error\":"))) {
        fprintf(stderr, "rpcclient: %s %s answered %d: %.300s\n", method, path, status, status < 0 ? "" : answer);
        exit(1);
    }
    return answer;
}

static void url(char *into, size_t size, long index) {
    snprintf(into, size, "http://127.0.0.1:9/file%06ld.bin", index);
}

static void *add_worker(void *argument) {
    long index = (long)argument;
    int fd = connect_to();
    char body[512], address[64];
    struct buffer buffer = {0};
    for (long i = index; i < count; i += threads) {
        url(address, sizeof address, i);
        int length;
        if (is_haul()) {
            length = snprintf(body, sizeof body, "{\"url\":\"%s\",\"paused\":true}", address);
        } else {
            length = snprintf(body, sizeof body,
                "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":\"aria2.addUri\",\"params\":[\"token:%s\","
                "[\"%s\"],{\"pause\":\"true\"}]}", secret, address);
        }
        exchange(fd, "POST", is_haul() ? "/api/v1/downloads" : "/jsonrpc", body, (size_t)length, &buffer);
    }
    free(buffer.bytes);
    close(fd);
    return NULL;
}

// Appends printf-formatted text to a buffer.
static void append(struct buffer *buffer, const char *format, const char *a, const char *b) {
    reserve(buffer, 512);
    buffer->used += (size_t)snprintf(buffer->bytes + buffer->used, 512, format, a, b);
}

// Counts the occurrences of `needle` in `text`.
static long occurrences(const char *text, const char *needle) {
    long found = 0;
    for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) found++;
    return found;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: rpcclient HOST PORT haul|aria2 SECRET add COUNT THREADS | batch FIRST COUNT |"
                        " list COUNT | read ID COUNT\n");
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    kind = argv[3];
    secret = argv[4];
    const char *step = argv[5];
    struct buffer buffer = {0};
    if (strcmp(step, "add") == 0 && argc == 8) {
        count = atoi(argv[6]);
        threads = atoi(argv[7]);
        pthread_t ids[256];
        double start = now();
        for (long t = 0; t < threads; t++) pthread_create(&ids[t], NULL, add_worker, (void *)t);
        for (long t = 0; t < threads; t++) pthread_join(ids[t], NULL);
        printf("%.3f\n", now() - start);
        return failed;
    }
    int fd = connect_to();
    if (strcmp(step, "batch") == 0 && argc == 8) {
        long first = atol(argv[6]), total = atol(argv[7]);
        struct buffer body = {0};
        char address[64];
        append(&body, is_haul() ? "[" : "{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"system.multicall\",\"params\":[[",
               "", "");
        for (long i = 0; i < total; i++) {
            url(address, sizeof address, first + i);
            if (is_haul()) {
                append(&body, "%s{\"url\":\"%s\",\"paused\":true}", i ? "," : "", address);
            } else {
                append(&body, "%s{\"methodName\":\"aria2.addUri\",\"params\":[\"token:%s\",", i ? "," : "", secret);
                append(&body, "[\"%s\"],{\"pause\":\"true\"}]}%s", address, "");
            }
        }
        append(&body, is_haul() ? "]" : "]]}", "", "");
        double start = now();
        const char *answer = exchange(fd, "POST", is_haul() ? "/api/v1/downloads" : "/jsonrpc", body.bytes,
                                      body.used, &buffer);
        double elapsed = now() - start;
        // Both answer the ids only: haul (asked with Prefer: return=minimal) a list of ids, aria2c a list of one
        // gid each.
        long added = is_haul() ? occurrences(answer, "\"") / 2 - 1 : occurrences(answer, "[\"");
        if (added != total) { fprintf(stderr, "rpcclient: the batch added %ld, not %ld\n", added, total); return 1; }
        printf("%.3f\n", elapsed);
    } else if (strcmp(step, "list") == 0 && argc == 7) {
        long total = atol(argv[6]);
        char body[512];
        double start = now();
        const char *answer;
        if (is_haul()) {
            answer = exchange(fd, "GET", "/api/v1/downloads", NULL, 0, &buffer);
        } else {
            int length = snprintf(body, sizeof body,
                "{\"jsonrpc\":\"2.0\",\"id\":\"l\",\"method\":\"aria2.tellWaiting\",\"params\":[\"token:%s\",0,%ld]}",
                secret, total + 10);
            answer = exchange(fd, "POST", "/jsonrpc", body, (size_t)length, &buffer);
        }
        double elapsed = now() - start;
        long listed = occurrences(answer, is_haul() ? "\"url\":" : "\"gid\":");
        if (listed != total) { fprintf(stderr, "rpcclient: listed %ld, not %ld\n", listed, total); return 1; }
        const char *key = is_haul() ? "\"id\":\"" : "\"gid\":\"";
        const char *id = strstr(answer, key) + strlen(key);
        printf("%.3f %.*s\n", elapsed, (int)(strchr(id, '"') - id), id);
    } else if (strcmp(step, "read") == 0 && argc == 8) {
        const char *id = argv[6];
        long total = atol(argv[7]);
        char path[256], body[512];
        int length = snprintf(body, sizeof body,
            "{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"method\":\"aria2.tellStatus\",\"params\":[\"token:%s\",\"%s\"]}",
            secret, id);
        snprintf(path, sizeof path, "/api/v1/downloads/%s", id);
        double start = now();
        for (long i = 0; i < total; i++) {
            const char *answer = is_haul() ? exchange(fd, "GET", path, NULL, 0, &buffer)
                                           : exchange(fd, "POST", "/jsonrpc", body, (size_t)length, &buffer);
            if (!strstr(answer, id)) { fprintf(stderr, "rpcclient: read %ld lacks the id\n", i); return 1; }
        }
        printf("%.3f\n", now() - start);
    } else {
        fprintf(stderr, "rpcclient: unknown step %s or wrong arguments\n", step);
        return 2;
    }
    close(fd);
    return 0;
}
