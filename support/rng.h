/* rng.h: the one random number generator of the project (splitmix64 seeding xoshiro256**),
 * with uniform and normal draws. Convention: state is explicit, never global, so runs are
 * reproducible from a seed and two graphs can run at once. */
#ifndef SN_RNG_H
#define SN_RNG_H

#include <math.h>
#include <stdint.h>

#include "hash.h" /* sn_hash_str: per-name seeds */

typedef struct {
    uint64_t s[4];
} sn_rng;

static inline uint64_t sn_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline sn_rng sn_rng_seed(uint64_t seed) {
    sn_rng r;
    for (int i = 0; i < 4; i++) r.s[i] = sn_splitmix64(&seed);
    return r;
}

static inline uint64_t sn_rng_next(sn_rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, res = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}

/* uniform in [0, 1) with 53 random bits */
static inline double sn_rng_uniform(sn_rng *r) { return (double)(sn_rng_next(r) >> 11) * 0x1.0p-53; }

/* uniform integer in [0, n) */
static inline uint64_t sn_rng_below(sn_rng *r, uint64_t n) { return sn_rng_next(r) % n; }

/* standard normal (Box-Muller; one draw per call, simple over fast) */
static inline double sn_rng_normal(sn_rng *r) {
    double u = sn_rng_uniform(r), v = sn_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* Jumps ahead (rng_jump.c): sn_rng_jump advances a generator as 2^log2_steps sn_rng_next calls
 * would, so that parts of one stream can be drawn at once, each from its own start, giving the
 * very numbers the stream gives one by one. The table is 8 KiB; building it takes about 2^24
 * word operations a doubling. */
typedef struct {
    uint64_t m[256][4];
} sn_rng_jumper;
void sn_rng_jump_init(sn_rng_jumper *j, int log2_steps);
void sn_rng_jump(const sn_rng_jumper *j, sn_rng *r);

#endif
