/* hash.h: the one hash of the project: 64-bit FNV-1a (Fowler, Noll, Vo), for the RNG's per-name
 * seeds, the CUDA kernel cache key, the JIT's and the renderer's sharing of identical kernels,
 * the simulator's module cache and the checkpoint's data fingerprints; and one finaliser.
 * Convention: a hash is a running state, started at SN_HASH_INIT and fed piece by piece; not
 * cryptographic (a match is confirmed by comparing the text where that matters). */
#ifndef SN_HASH_H
#define SN_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SN_HASH_INIT 0xcbf29ce484222325ull /* FNV-1a's offset basis */
#define SN_HASH_PRIME 0x100000001b3ull     /* FNV-1a's 64-bit prime */

/* h with n bytes of p folded in. */
static inline uint64_t sn_hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * SN_HASH_PRIME;
    return h;
}

/* h with one word folded in as FNV-1a folds a byte (a token id: the checkpoint's fingerprints
 * of the training and validation tokens are this over the ids). */
static inline uint64_t sn_hash_word(uint64_t h, uint64_t v) { return (h ^ v) * SN_HASH_PRIME; }

/* h (0: SN_HASH_INIT) with the bytes of string s folded in, to derive per-name streams (a
 * parameter's init does not depend on the order parameters are created in). */
static inline uint64_t sn_hash_str(const char *s, uint64_t h) {
    if (!h) h = SN_HASH_INIT;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * SN_HASH_PRIME;
    return h;
}

/* A field of a key: its bytes, then its length (so "ab","c" and "a","bc" differ). */
static inline uint64_t sn_hash_field(uint64_t h, const void *p, size_t n) {
    h = sn_hash_bytes(h, p, n);
    for (int k = 0; k < 8; k++) h = (h ^ ((uint64_t)n >> (8 * k) & 0xff)) * SN_HASH_PRIME;
    return h;
}

/* MurmurHash3's 64-bit finaliser: every bit of x affects every bit of the result. */
static inline uint64_t sn_hash_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

#endif
