/* memfree.c: the host memory this process may still take (memfree.h). Convention: every file is
 * read under the caller's root; a file that is missing or says "max" sets no limit. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memfree.h"

/* The first number in root/path (after `key` when given: a "Key: N kB" line, in bytes), or -1
 * when there is none ("max", no file). */
static int64_t read_number(const char *root, const char *path, const char *key) {
    char file[1024], line[512];
    snprintf(file, sizeof file, "%s%s", root, path);
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    int64_t v = -1;
    size_t klen = key ? strlen(key) : 0;
    while (v < 0 && fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, klen)) continue;
        char *end;
        long long x = strtoll(line + klen, &end, 10);
        if (end != line + klen && x >= 0) v = key ? (int64_t)x * 1024 : (int64_t)x;
        if (!key) break;
    }
    fclose(f);
    return v;
}

/* The memory cgroup's path of this process from root/proc/self/cgroup: v1's
 * "N:...memory...:/path" (v2 false), else v2's "0::/path" (v2 true: in a hybrid layout v2's
 * hierarchy has no memory controller, v1's has); false when neither is there. */
static bool cgroup_path(const char *root, char *out, size_t len, bool *v2) {
    char file[1024], line[1024], unified[800] = "";
    snprintf(file, sizeof file, "%s/proc/self/cgroup", root);
    FILE *f = fopen(file, "r");
    if (!f) return false;
    bool v1 = false, has_v2 = false;
    while (!v1 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0; /* line: the hierarchy's number */
        const char *ctrl = c1 + 1, *path = c2 + 1;
        for (const char *w = ctrl; *w && !v1;) { /* v1: a comma-separated list of controllers */
            size_t n = strcspn(w, ",");
            v1 = n == 6 && !strncmp(w, "memory", 6);
            w += n + (w[n] == ',');
        }
        if (v1) snprintf(out, len, "%s", strcmp(path, "/") ? path : "");
        else if (!strcmp(line, "0") && !*ctrl && !has_v2) {
            snprintf(unified, sizeof unified, "%s", strcmp(path, "/") ? path : "");
            has_v2 = true;
        }
    }
    fclose(f);
    if (!v1 && has_v2) snprintf(out, len, "%s", unified);
    *v2 = !v1;
    return v1 || has_v2;
}

/* limit - usage of the cgroup at dir (v2 or v1 file names), or -1 without a limit; *limit the
 * limit. A v1 "no limit" is a huge number (PAGE_COUNTER_MAX pages): taken as none. */
static int64_t cgroup_left(const char *root, const char *dir, bool v2, int64_t *limit) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    snprintf(b, sizeof b, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    int64_t lim = read_number(root, a, NULL), used = read_number(root, b, NULL);
    if (lim < 0 || lim >= (INT64_C(1) << 60) || used < 0) return -1;
    *limit = lim;
    return lim > used ? lim - used : 0;
}

bool sn_host_memory(const char *root, int64_t *free_bytes, int64_t *total) {
    int64_t avail = read_number(root, "/proc/meminfo", "MemAvailable:"),
            all = read_number(root, "/proc/meminfo", "MemTotal:");
    if (avail < 0 || all < 0) return false;
    *free_bytes = avail;
    *total = all;
    char path[800], dir[1000];
    bool v2 = false;
    if (!cgroup_path(root, path, sizeof path, &v2)) return true;
    /* the process's own cgroup, or (a cgroup namespace, where the path is not under the mount)
       the mount's root, which is then the container's */
    int64_t limit = 0, left;
    snprintf(dir, sizeof dir, "/sys/fs/cgroup%s%s", v2 ? "" : "/memory", path);
    if ((left = cgroup_left(root, dir, v2, &limit)) < 0) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", v2 ? "" : "/memory");
        left = cgroup_left(root, dir, v2, &limit);
    }
    if (left >= 0 && left < *free_bytes) *free_bytes = left;
    if (left >= 0 && limit < *total) *total = limit;
    return true;
}
