/* fuzz_util.h: what the libFuzzer harnesses share: the fuzzer's bytes as a file (a memfd named
 * /proc/self/fd/N, for readers that take a path) and a loud failure for a broken property.
 * Convention: a harness returns 0 on every refused input; only a broken invariant aborts. */
#ifndef SN_FUZZ_UTIL_H
#define SN_FUZZ_UTIL_H

#ifndef _GNU_SOURCE /* meson passes -D_GNU_SOURCE; a harness built alone needs it for memfd_create */
#define _GNU_SOURCE
#endif
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes bytes into a new memfd and its path into path; returns the fd (close it), -1 on failure. */
static inline int fuzz_file(const uint8_t *bytes, size_t n, char path[64]) {
    int fd = memfd_create("sn_fuzz", 0);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, bytes + done, n - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

/* Writes bytes into the file at path (created or truncated): what a harness whose reader takes a
 * folder puts in it; false on failure. */
static inline bool fuzz_write_file(const char *path, const uint8_t *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(bytes, 1, n, f) == n;
    return !fclose(f) && ok;
}

/* A property the code must keep on every input it accepts: print what broke and abort, so that
 * libFuzzer saves the input as a crash. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz property broken: %s: ", #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
