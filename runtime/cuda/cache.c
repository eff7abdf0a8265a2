/* cache.c: compiled CUBINs on disk (support/blobcache.h), so a second run of the same model
 * compiles nothing. An entry is <dir>/<key>.cubin: the blob cache's header (its tag the arch),
 * the ptxas report and the CUBIN. The key hashes the source, the prelude, NVRTC's options and
 * version, the library's name (a stand-in's entries are its own) and the arch. */
#include <stdlib.h>
#include <string.h>

#include "cuda_rt.h"

static const sn_blobcache_format cubin_format = {"SNCUBIN\x01", 2 /* the CRC covers key and arch */,
                                                 ".cubin"};

void sn_cuda_cache_init(sn_cuda_cache *c, const char *dir_override, bool disabled) {
    sn_blobcache_init(c, dir_override, NULL, disabled);
}

static sn_status cache_key(sn_cuda_api *a, const char *src, int arch, uint8_t key[16], sn_err *e) {
    int major = 0, minor = 0;
    sn_status st = sn_nvrtc_version(&a->nvrtc, &major, &minor, e);
    if (st) return st;
    sn_blobcache_hasher s;
    sn_blobcache_hash_begin(&s);
    char head[96], gpu[48];
    snprintf(head, sizeof head, "sinter cubin %u; nvrtc %d.%d; sm_%d", cubin_format.version,
             major, minor, arch);
    sn_blobcache_hash_str(&s, head);
    sn_blobcache_hash_str(&s, sn_nvrtc_lib_name(&a->nvrtc));
    const char *opts[8];
    int n = sn_nvrtc_options(arch, gpu, opts);
    for (int i = 0; i < n; i++) sn_blobcache_hash_str(&s, opts[i]);
    sn_blobcache_hash_str(&s, sn_cuda_prelude());
    sn_blobcache_hash_str(&s, src);
    sn_blobcache_hash_end(&s, key);
    return SN_OK;
}

bool sn_cuda_cache_path(const sn_cuda_cache *c, sn_cuda_api *a, const char *src, int arch,
                        char *path, size_t len) {
    uint8_t key[16];
    sn_err e;
    if (!c->dir[0] || cache_key(a, src, arch, key, &e)) return false;
    sn_blobcache_path(c, &cubin_format, key, path, len);
    return true;
}

sn_status sn_cuda_cache_lookup(sn_cuda_cache *c, sn_cuda_api *a, const char *src, int arch,
                               sn_cuda_cache_slot *slot, sn_cuda_module *out, bool *hit,
                               sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    *hit = false;
    *slot = (sn_cuda_cache_slot){.use = sn_blobcache_on(c)};
    if (!slot->use) {
        c->misses++;
        return SN_OK;
    }
    sn_status st = cache_key(a, src, arch, slot->key, e);
    if (st) return st;
    sn_blobcache_path(c, &cubin_format, slot->key, slot->path, sizeof slot->path);
    size_t log_len, cubin_len;
    void *cubin;
    if (!sn_blobcache_read(c, &cubin_format, slot->path, slot->key, (uint32_t)arch, &out->log,
                           &log_len, &cubin, &cubin_len))
        return SN_OK;
    *hit = true;
    out->cubin = cubin;
    out->cubin_size = cubin_len;
    out->n_info = sn_ptxas_parse(out->log, NULL, 0);
    out->info = sn_calloc((size_t)out->n_info + 1, sizeof *out->info, "the ptxas report", e);
    if (!out->info) return SN_ERR_OOM;
    sn_ptxas_parse(out->log, out->info, out->n_info);
    return SN_OK;
}

void sn_cuda_cache_store(sn_cuda_cache *c, const sn_cuda_cache_slot *slot, int arch,
                         const sn_cuda_module *m) {
    if (!slot->use) return;
    sn_blobcache_write(c, &cubin_format, slot->path, slot->key, (uint32_t)arch, m->log,
                       m->log ? strlen(m->log) : 0, m->cubin, m->cubin_size, "kernels");
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
