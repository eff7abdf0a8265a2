/* cache.c: compiled CUBINs on disk, so a second run of the same model compiles nothing. An entry
 * is <dir>/<key>.cubin: a header (magic, version, key, arch, sizes, CRC-32 of the key, arch, ptxas
 * report and CUBIN), the ptxas report and the CUBIN. Convention: an entry is written whole or not
 * at all (support/savefile), and one that is not a regular file, or whose header, size, checksum
 * or key (the file's name) is not exactly right, is recompiled and replaced. A cache folder owned
 * by another user is not used (as ccache and pip do); every cache message names --no-cache. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "support/hash.h"
#include "support/savefile.h"
#include "cuda_rt.h"

#define CACHE_MAGIC "SNCUBIN\x01"
enum { CACHE_VERSION = 2 }; /* 2: the CRC covers the key and arch */

typedef struct {
    char magic[8];
    uint32_t version, arch;
    uint8_t key[16];
    uint64_t log_len, cubin_len;
    uint32_t crc; /* of the key, the arch (u32), the log and the cubin */
    uint32_t zero;
} entry_head;

void sn_cuda_cache_init(sn_cuda_cache *c, const char *dir_override, bool disabled) {
    *c = (sn_cuda_cache){.disabled = disabled};
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir_override && *dir_override) snprintf(c->dir, sizeof c->dir, "%s", dir_override);
    else if (xdg && *xdg) snprintf(c->dir, sizeof c->dir, "%s/sinter", xdg);
    else if (home && *home) snprintf(c->dir, sizeof c->dir, "%s/.cache/sinter", home);
    struct stat st;
    if (!disabled && c->dir[0] && stat(c->dir, &st) == 0 && st.st_uid != geteuid()) {
        /* another user's entries could be planted CUBINs: compile instead */
        fprintf(stderr, "warning: kernel cache %s belongs to user %u, not to you (%u): not used; "
                "set XDG_CACHE_HOME to a folder of your own, or pass --no-cache\n", c->dir,
                (unsigned)st.st_uid, (unsigned)geteuid());
        c->foreign = true;
        c->dir[0] = '\0';
    }
}

/* ---- the key: two 64-bit FNV-1a streams with different seeds, finalised by a mixer ---- */

typedef struct {
    uint64_t h[2];
} hasher;

static void hash_bytes(hasher *s, const void *p, size_t n) {
    s->h[0] = sn_hash_field(s->h[0], p, n); /* field boundaries matter: "ab","c" != "a","bc" */
    s->h[1] = sn_hash_field(s->h[1], p, n);
}

static sn_status cache_key(sn_cuda_api *a, const char *src, int arch, uint8_t key[16], sn_err *e) {
    int major = 0, minor = 0;
    sn_status st = sn_nvrtc_version(&a->nvrtc, &major, &minor, e);
    if (st) return st;
    hasher s = {{SN_HASH_INIT, 0x84222325cbf29ce4ull}};
    char head[96], gpu[48];
    snprintf(head, sizeof head, "sinter cubin %d; nvrtc %d.%d; sm_%d", CACHE_VERSION, major, minor,
             arch);
    hash_bytes(&s, head, strlen(head));
    const char *lib = sn_nvrtc_lib_name(&a->nvrtc); /* a stand-in's entries are its own */
    hash_bytes(&s, lib, strlen(lib));
    const char *opts[8];
    int n = sn_nvrtc_options(arch, gpu, opts);
    for (int i = 0; i < n; i++) hash_bytes(&s, opts[i], strlen(opts[i]));
    hash_bytes(&s, sn_cuda_prelude(), strlen(sn_cuda_prelude()));
    hash_bytes(&s, src, strlen(src));
    uint64_t k0 = sn_hash_mix(s.h[0] ^ sn_hash_mix(s.h[1]));
    uint64_t k1 = sn_hash_mix(s.h[1] + 0x9e3779b97f4a7c15ull * k0);
    memcpy(key, &k0, 8);
    memcpy(key + 8, &k1, 8);
    return SN_OK;
}

static void key_path(const sn_cuda_cache *c, const uint8_t key[16], char *path, size_t len) {
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
    snprintf(path, len, "%s/%s.cubin", c->dir, hex);
}

bool sn_cuda_cache_path(const sn_cuda_cache *c, sn_cuda_api *a, const char *src, int arch,
                        char *path, size_t len) {
    uint8_t key[16];
    sn_err e;
    if (!c->dir[0] || cache_key(a, src, arch, key, &e)) return false;
    key_path(c, key, path, len);
    return true;
}

static uint32_t entry_crc(const uint8_t key[16], uint32_t arch, const char *log, uint64_t log_len,
                          const void *cubin, uint64_t cubin_len) {
    uLong crc = crc32_z(0, key, 16);
    crc = crc32_z(crc, (const Bytef *)&arch, sizeof arch);
    crc = crc32_z(crc, (const Bytef *)log, log_len);
    return (uint32_t)crc32_z(crc, (const Bytef *)cubin, cubin_len);
}

/* Reads the entry at path (named by key) into out when it is a regular file, whole, and holds
 * this key under its checksum; false otherwise, with *present saying whether a file was there (a
 * bad one). Opened without blocking: a FIFO planted under an entry's name must not hang. */
static bool read_entry(const char *path, const uint8_t key[16], int arch, sn_cuda_module *out,
                       bool *present) {
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
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return false;
    }
    entry_head h;
    bool ok = fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, CACHE_MAGIC, 8) == 0 &&
              h.version == CACHE_VERSION && h.arch == (uint32_t)arch &&
              memcmp(h.key, key, 16) == 0 && h.log_len < (1u << 30) && h.cubin_len > 0 &&
              h.cubin_len < (1u << 30);
    if (ok) {
        struct stat st;
        ok = fstat(fileno(f), &st) == 0 &&
             (uint64_t)st.st_size == sizeof h + h.log_len + h.cubin_len;
    }
    if (ok) {
        out->log = malloc(h.log_len + 1);
        out->cubin = malloc(h.cubin_len);
        ok = out->log && out->cubin && fread(out->log, 1, h.log_len, f) == h.log_len &&
             fread(out->cubin, 1, h.cubin_len, f) == h.cubin_len;
    }
    if (ok) {
        ok = entry_crc(key, (uint32_t)arch, out->log, h.log_len, out->cubin, h.cubin_len) == h.crc;
        out->log[h.log_len] = '\0';
        out->cubin_size = h.cubin_len;
    }
    fclose(f);
    if (!ok) {
        free(out->log);
        free(out->cubin);
        out->log = out->cubin = NULL;
        out->cubin_size = 0;
    }
    return ok;
}

static sn_status mkdirs(const char *dir, sn_err *e) {
    char p[512];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return sn_fail(e, SN_ERR_IO, "cannot create %s: %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    return SN_OK;
}

static sn_status write_entry(const sn_cuda_cache *c, const char *path, const uint8_t key[16],
                             int arch, const sn_cuda_module *m, sn_err *e) {
    sn_status st = mkdirs(c->dir, e);
    if (st) return st;
    entry_head h = {.version = CACHE_VERSION, .arch = (uint32_t)arch,
                    .log_len = m->log ? strlen(m->log) : 0, .cubin_len = m->cubin_size};
    memcpy(h.magic, CACHE_MAGIC, 8);
    memcpy(h.key, key, 16);
    h.crc = entry_crc(key, (uint32_t)arch, m->log ? m->log : "", h.log_len, m->cubin, h.cubin_len);
    sn_savefile s;
    if ((st = sn_savefile_open(&s, path, "kernel cache entry", e))) return st;
    if (fwrite(&h, sizeof h, 1, s.f) != 1 || fwrite(m->log ? m->log : "", 1, h.log_len, s.f) != h.log_len ||
        fwrite(m->cubin, 1, h.cubin_len, s.f) != h.cubin_len) {
        sn_savefile_abort(&s);
        return sn_fail(e, SN_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    }
    return sn_savefile_commit(&s, e);
}

sn_status sn_cuda_cache_lookup(sn_cuda_cache *c, sn_cuda_api *a, const char *src, int arch,
                               sn_cuda_cache_slot *slot, sn_cuda_module *out, bool *hit,
                               sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    *hit = false;
    *slot = (sn_cuda_cache_slot){.use = !c->disabled && c->dir[0]};
    if (slot->use) {
        sn_status st = cache_key(a, src, arch, slot->key, e);
        if (st) return st;
        key_path(c, slot->key, slot->path, sizeof slot->path);
        bool present;
        if (read_entry(slot->path, slot->key, arch, out, &present)) {
            c->hits++;
            *hit = true;
            out->n_info = sn_ptxas_parse(out->log, NULL, 0);
            out->info = sn_calloc((size_t)out->n_info + 1, sizeof *out->info, "the ptxas report", e);
            if (!out->info) return SN_ERR_OOM;
            sn_ptxas_parse(out->log, out->info, out->n_info);
            return SN_OK;
        }
        if (present) c->rejected++;
    }
    c->misses++;
    return SN_OK;
}

void sn_cuda_cache_store(sn_cuda_cache *c, const sn_cuda_cache_slot *slot, int arch,
                         const sn_cuda_module *m) {
    sn_err we;
    if (!slot->use || c->unwritable || !write_entry(c, slot->path, slot->key, arch, m, &we)) return;
    /* a cache that cannot be written costs time, not correctness: said once, then not tried */
    c->unwritable = true;
    fprintf(stderr, "warning: kernel cache: %s: kernels are compiled but not cached (set "
            "XDG_CACHE_HOME to a writable folder, or pass --no-cache)\n", we.msg);
}

sn_status sn_cuda_cache_compile(sn_cuda_cache *c, sn_cuda_api *a, const char *src,
                                const char *name, int arch, sn_cuda_module *out, bool *compiled,
                                sn_err *e) {
    sn_cuda_cache_slot slot;
    bool hit = false;
    *compiled = false;
    sn_status st = sn_cuda_cache_lookup(c, a, src, arch, &slot, out, &hit, e);
    if (st || hit) return st;
    *compiled = true;
    if ((st = sn_cuda_nvrtc_compile(a, src, name, arch, out, e))) return st;
    sn_cuda_cache_store(c, &slot, arch, out);
    return SN_OK;
}
