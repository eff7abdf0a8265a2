/* alloc.c: host allocation that reports failure as a status (SN_ERR_OOM) instead of aborting.
 * Convention: the message names the size asked for, what it was for, and what to do. */
#include <stdlib.h>

#include "ir.h"

char *sn_bytes_str(int64_t bytes, char *buf, size_t len) {
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, len, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024) snprintf(buf, len, "%.1f KiB", b / 1024);
    else snprintf(buf, len, "%lld bytes", (long long)bytes);
    return buf;
}

sn_status sn_fail_oom(sn_err *e, size_t bytes, const char *what) {
    char s[32];
    return sn_fail(e, SN_ERR_OOM, "out of memory: %s needs %s (%zu bytes) more than this machine "
                   "can give: use a smaller --batch or --seq, or a smaller model",
                   what, sn_bytes_str((int64_t)bytes, s, sizeof s), bytes);
}

void *sn_malloc(size_t bytes, const char *what, sn_err *e) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) sn_fail_oom(e, bytes, what);
    return p;
}

void *sn_calloc(size_t n, size_t size, const char *what, sn_err *e) {
    if (size && n > SIZE_MAX / size) {
        sn_fail_oom(e, SIZE_MAX, what);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) sn_fail_oom(e, n * size, what);
    return p;
}

void *sn_realloc(void *p, size_t bytes, const char *what, sn_err *e) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) sn_fail_oom(e, bytes, what);
    return q;
}
