/* blobcache.h: compiled code cached on disk, so that a second run of the same model compiles
 * nothing: a folder of entries, each a file named by a 16-byte key holding two blobs (the CUDA
 * cache: a ptxas report and a CUBIN, runtime/cuda/cache.c; the CPU's: a description and an
 * object file, codegen/llvm/llvm_jit.c). An entry is a header (the format's magic and version,
 * a tag, the key, the two sizes, a CRC-32 of key, tag and both blobs), then the blobs.
 * Convention: an entry is written whole or not at all (support/savefile); one that is not a
 * regular file, or whose header, size, checksum or key (the file's name) is not exactly right,
 * is not used (the caller compiles and replaces it). A folder owned by another user is not used
 * (as ccache and pip do: its entries could be planted code); every message names --no-cache. */
#ifndef SN_BLOBCACHE_H
#define SN_BLOBCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct {
    char dir[512]; /* $XDG_CACHE_HOME/sinter[/SUB] or ~/.cache/sinter[/SUB]; "" disables */
    bool disabled; /* --no-cache */
    int hits, misses, rejected; /* this process's lookups; rejected: bad entries compiled again */
    bool unwritable; /* a store failed (warned once): no more are tried */
    bool foreign;    /* the folder belongs to another user: not used (warned at init) */
} sn_blobcache;

/* What an entry holds: 8 bytes of magic, a version, the file name's extension (".cubin"). */
typedef struct {
    const char *magic;
    uint32_t version;
    const char *ext;
} sn_blobcache_format;

/* The folder: dir_override, else $XDG_CACHE_HOME/sinter, else ~/.cache/sinter, with /sub
 * appended when sub is not NULL; created on the first store. One that exists and belongs to
 * another user is not used (a warning; dir left empty, foreign set). */
void sn_blobcache_init(sn_blobcache *c, const char *dir_override, const char *sub, bool disabled);
/* Whether lookups and stores go to disk (not disabled, a folder). */
bool sn_blobcache_on(const sn_blobcache *c);

/* A key: two 64-bit FNV-1a streams with different seeds over the fields fed in (each field's
 * length counted, so "ab","c" differs from "a","bc"), finalised by a mixer. */
typedef struct {
    uint64_t h[2];
} sn_blobcache_hasher;
void sn_blobcache_hash_begin(sn_blobcache_hasher *s);
void sn_blobcache_hash(sn_blobcache_hasher *s, const void *p, size_t n);
void sn_blobcache_hash_str(sn_blobcache_hasher *s, const char *str);
void sn_blobcache_hash_end(const sn_blobcache_hasher *s, uint8_t key[16]);

/* The file of key's entry: DIR/<32 hex digits><ext>. */
void sn_blobcache_path(const sn_blobcache *c, const sn_blobcache_format *f, const uint8_t key[16],
                       char *path, size_t len);

/* Reads the entry at path into *a and *b (malloc'ed; *a NUL-terminated after its na bytes) when
 * it is a regular file, whole, of format f, and holds key and tag under its checksum; false
 * otherwise, nothing allocated, with *present saying whether a file was there (a bad one).
 * Counts a hit, or a miss (and a rejected entry when present). */
bool sn_blobcache_read(sn_blobcache *c, const sn_blobcache_format *f, const char *path,
                       const uint8_t key[16], uint32_t tag, char **a, size_t *na, void **b,
                       size_t *nb);

/* Writes the entry (the folder made first). A failure is a warning on stderr naming what, given
 * once: later stores are skipped (a cache that cannot be written costs time, not correctness). */
void sn_blobcache_write(sn_blobcache *c, const sn_blobcache_format *f, const char *path,
                        const uint8_t key[16], uint32_t tag, const char *a, size_t na,
                        const void *b, size_t nb, const char *what);

#endif
