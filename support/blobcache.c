/* blobcache.c: the compiled-code cache's folder and entries (blobcache.h). */
#include "blobcache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "hash.h"
#include "savefile.h"

typedef struct {
    char magic[8];
    uint32_t version, tag;
    uint8_t key[16];
    uint64_t a_len, b_len;
    uint32_t crc; /* of the key, the tag (u32), a and b */
    uint32_t zero;
} entry_head;

void sn_blobcache_init(sn_blobcache *c, const char *dir_override, const char *sub, bool disabled) {
    *c = (sn_blobcache){.disabled = disabled};
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[480] = "";
    if (dir_override && *dir_override) snprintf(base, sizeof base, "%s", dir_override);
    else if (xdg && *xdg) snprintf(base, sizeof base, "%s/sinter", xdg);
    else if (home && *home) snprintf(base, sizeof base, "%s/.cache/sinter", home);
    if (base[0]) snprintf(c->dir, sizeof c->dir, "%s%s%s", base, sub ? "/" : "", sub ? sub : "");
    struct stat st;
    for (int k = 0; k < 2 && !disabled && c->dir[0]; k++) { /* the folder, and the one above it */
        const char *d = k ? base : c->dir;
        if (stat(d, &st) != 0 || st.st_uid == geteuid()) continue;
        /* another user's entries could be planted code: compile instead */
        fprintf(stderr, "warning: kernel cache %s belongs to user %u, not to you (%u): not used; "
                "set XDG_CACHE_HOME to a folder of your own, or pass --no-cache\n", d,
                (unsigned)st.st_uid, (unsigned)geteuid());
        c->foreign = true;
        c->dir[0] = '\0';
    }
}

bool sn_blobcache_on(const sn_blobcache *c) { return !c->disabled && c->dir[0]; }

void sn_blobcache_hash_begin(sn_blobcache_hasher *s) {
    *s = (sn_blobcache_hasher){{SN_HASH_INIT, 0x84222325cbf29ce4ull}};
}

void sn_blobcache_hash(sn_blobcache_hasher *s, const void *p, size_t n) {
    s->h[0] = sn_hash_field(s->h[0], p, n);
    s->h[1] = sn_hash_field(s->h[1], p, n);
}

void sn_blobcache_hash_str(sn_blobcache_hasher *s, const char *str) {
    sn_blobcache_hash(s, str, strlen(str));
}

void sn_blobcache_hash_end(const sn_blobcache_hasher *s, uint8_t key[16]) {
    uint64_t k0 = sn_hash_mix(s->h[0] ^ sn_hash_mix(s->h[1]));
    uint64_t k1 = sn_hash_mix(s->h[1] + 0x9e3779b97f4a7c15ull * k0);
    memcpy(key, &k0, 8);
    memcpy(key + 8, &k1, 8);
}

void sn_blobcache_path(const sn_blobcache *c, const sn_blobcache_format *f, const uint8_t key[16],
                       char *path, size_t len) {
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
    snprintf(path, len, "%s/%s%s", c->dir, hex, f->ext);
}

static uint32_t entry_crc(const uint8_t key[16], uint32_t tag, const char *a, uint64_t na,
                          const void *b, uint64_t nb) {
    uLong crc = crc32_z(0, key, 16);
    crc = crc32_z(crc, (const Bytef *)&tag, sizeof tag);
    crc = crc32_z(crc, (const Bytef *)a, na);
    return (uint32_t)crc32_z(crc, (const Bytef *)b, nb);
}

/* The entry's blobs when path is a good entry (blobcache.h); opened without blocking: a FIFO
 * planted under an entry's name must not hang. */
static bool read_entry(const sn_blobcache_format *f, const char *path, const uint8_t key[16],
                       uint32_t tag, char **a, size_t *na, void **b, size_t *nb, bool *present) {
    *present = false;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    *present = true;
    struct stat fst;
    if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
        close(fd);
        return false;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        return false;
    }
    entry_head h;
    bool ok = fread(&h, sizeof h, 1, fp) == 1 && memcmp(h.magic, f->magic, 8) == 0 &&
              h.version == f->version && h.tag == tag && memcmp(h.key, key, 16) == 0 &&
              h.a_len < (1u << 30) && h.b_len > 0 && h.b_len < (1u << 30) &&
              (uint64_t)fst.st_size == sizeof h + h.a_len + h.b_len;
    if (ok) {
        *a = malloc(h.a_len + 1);
        *b = malloc(h.b_len);
        ok = *a && *b && fread(*a, 1, h.a_len, fp) == h.a_len && fread(*b, 1, h.b_len, fp) == h.b_len &&
             entry_crc(key, tag, *a, h.a_len, *b, h.b_len) == h.crc;
        if (ok) {
            (*a)[h.a_len] = '\0';
            *na = h.a_len;
            *nb = h.b_len;
        } else {
            free(*a);
            free(*b);
            *a = NULL;
            *b = NULL;
        }
    }
    fclose(fp);
    return ok;
}

bool sn_blobcache_read(sn_blobcache *c, const sn_blobcache_format *f, const char *path,
                       const uint8_t key[16], uint32_t tag, char **a, size_t *na, void **b,
                       size_t *nb) {
    *a = NULL;
    *b = NULL;
    *na = *nb = 0;
    bool present = false;
    if (sn_blobcache_on(c) && read_entry(f, path, key, tag, a, na, b, nb, &present)) {
        c->hits++;
        return true;
    }
    c->misses++;
    if (present) c->rejected++;
    return false;
}

static sn_status mkdirs(const char *dir, sn_err *e) {
    char p[512];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char ch = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return sn_fail(e, SN_ERR_IO, "cannot create %s: %s", p, strerror(errno));
            *s = ch;
            if (!ch) break;
        }
    }
    return SN_OK;
}

static sn_status write_entry(const sn_blobcache *c, const sn_blobcache_format *f, const char *path,
                             const uint8_t key[16], uint32_t tag, const char *a, size_t na,
                             const void *b, size_t nb, sn_err *e) {
    sn_status st = mkdirs(c->dir, e);
    if (st) return st;
    entry_head h = {.version = f->version, .tag = tag, .a_len = na, .b_len = nb};
    memcpy(h.magic, f->magic, 8);
    memcpy(h.key, key, 16);
    h.crc = entry_crc(key, tag, a ? a : "", na, b, nb);
    sn_savefile s;
    if ((st = sn_savefile_open(&s, path, "kernel cache entry", e))) return st;
    if (fwrite(&h, sizeof h, 1, s.f) != 1 || fwrite(a ? a : "", 1, na, s.f) != na ||
        fwrite(b, 1, nb, s.f) != nb) {
        sn_savefile_abort(&s);
        return sn_fail(e, SN_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    }
    return sn_savefile_commit(&s, e);
}

void sn_blobcache_write(sn_blobcache *c, const sn_blobcache_format *f, const char *path,
                        const uint8_t key[16], uint32_t tag, const char *a, size_t na,
                        const void *b, size_t nb, const char *what) {
    sn_err we;
    if (!sn_blobcache_on(c) || c->unwritable || !write_entry(c, f, path, key, tag, a, na, b, nb, &we))
        return;
    c->unwritable = true;
    fprintf(stderr, "warning: kernel cache: %s: %s are compiled but not cached (set "
            "XDG_CACHE_HOME to a writable folder, or pass --no-cache)\n", we.msg, what);
}
