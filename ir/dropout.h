/* dropout.h: the dropout op's mask, defined once: the interpreter calls it, and the code
 * generators write the same integer arithmetic (llvm_pointwise.c, the CUDA prelude's
 * sn_dropout), so a kernel's mask is the interpreter's bit for bit.
 * Convention: a counter-based hash of (seed, site, i): nothing is stored between the forward
 * and the backward, which makes the same mask again from the same three numbers. seed is the
 * step's scalar (an integer below 2^24, exact in f32: the trainer sets it), site the op's
 * number in its model, i the element's row-major index (below 2^32). */
#ifndef SN_DROPOUT_H
#define SN_DROPOUT_H

#include <stdint.h>

#define SN_DROPOUT_SEED_MAX (1u << 24) /* seeds are below: exact as f32 */

/* MurmurHash3's 32-bit finaliser: a bijection in which every input bit flips about half of the
 * output bits. */
static inline uint32_t sn_dropout_fmix(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* The key of (seed, site): one per kernel launch and op. */
static inline uint32_t sn_dropout_key(uint32_t seed, uint32_t site) {
    return sn_dropout_fmix(seed * 0x9e3779b1u + site * 0x7feb352du + 0x68e31da4u);
}

/* Element i's 32 random bits under key. */
static inline uint32_t sn_dropout_bits(uint32_t key, uint32_t i) {
    return sn_dropout_fmix(i * 0x9e3779b1u + key);
}

/* Elements whose bits are below the threshold are dropped: p of them, to 2^-32. */
static inline uint32_t sn_dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t <= 0 ? 0 : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* What a kept element is multiplied by: 1/(1-p) rounded to f32 (x * it rounds once). */
static inline float sn_dropout_scale(float p) { return (float)(1.0 / (1.0 - (double)p)); }

#endif
