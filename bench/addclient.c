// Adds COUNT paused downloads to a daemon, one request each, from THREADS threads with a keep-alive connection each,
// and prints the wall time in seconds. A compiled client, so that the client is not what is measured: a Python one
// spends about 1.4 s on 10,000 requests even against nginx serving a static file.
//
//   addclient HOST PORT haul TOKEN COUNT THREADS      (POST /api/v1/downloads {"url": ..., "paused": true})
//   addclient HOST PORT aria2 SECRET COUNT THREADS    (POST /jsonrpc aria2.addUri with {"pause": "true"})
//
// Built by bench/daemon.sh with the system's cc. Exits 1 on any answer that is not 2xx.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *kind, *secret;
static int port, count, threads;
static volatile int failed;

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

// Reads one response (Content-Length framing) and returns its status, or -1.
static int read_response(int fd, char *buffer, size_t size) {
    size_t used = 0;
    char *end = NULL;
    while (!(end = strstr(buffer, "\r\n\r\n"))) {
        ssize_t got = read(fd, buffer + used, size - used - 1);
        if (got <= 0) return -1;
        used += (size_t)got;
        buffer[used] = 0;
    }
    int status = atoi(buffer + 9);
    size_t length = 0;
    for (char *line = buffer; line < end; line = strstr(line, "\r\n") + 2) {
        if (strncasecmp(line, "content-length:", 15) == 0) length = strtoul(line + 15, NULL, 10);
    }
    size_t have = used - (size_t)(end + 4 - buffer);
    while (have < length) {
        ssize_t got = read(fd, buffer, size - 1);
        if (got <= 0) return -1;
        have += (size_t)got;
    }
    return status;
}

static void *worker(void *argument) {
    long index = (long)argument;
    int fd = connect_to();
    char body[512], request[1024], response[65536];
    for (long i = index; i < count; i += threads) {
        int length;
        const char *path;
        if (strcmp(kind, "haul") == 0) {
            path = "/api/v1/downloads";
            length = snprintf(body, sizeof body, "{\"url\":\"http://127.0.0.1:9/file%06ld.bin\",\"paused\":true}", i);
        } else {
            path = "/jsonrpc";
            length = snprintf(body, sizeof body,
                "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":\"aria2.addUri\",\"params\":[\"token:%s\","
                "[\"http://127.0.0.1:9/file%06ld.bin\"],{\"pause\":\"true\"}]}", secret, i);
        }
        int total = snprintf(request, sizeof request,
            "POST %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n%s", path, host, port, secret, length, body);
        if (write(fd, request, (size_t)total) != total) { failed = 1; break; }
        response[0] = 0;
        int status = read_response(fd, response, sizeof response);
        if (status < 200 || status > 299) {
            fprintf(stderr, "addclient: request %ld answered %d\n", i, status);
            failed = 1;
            break;
        }
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage: addclient HOST PORT haul|aria2 SECRET COUNT THREADS\n"); return 2; }
    host = argv[1];
    port = atoi(argv[2]);
    kind = argv[3];
    secret = argv[4];
    count = atoi(argv[5]);
    threads = atoi(argv[6]);
    pthread_t ids[256];
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long t = 0; t < threads; t++) pthread_create(&ids[t], NULL, worker, (void *)t);
    for (long t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    printf("%.3f\n", (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9);
    return failed;
}
