/* rng_jump.c: rng.h's jumps. xoshiro256**'s step is linear over GF(2) on its 256 state bits
 * (xors, shifts, a rotation), so 2^k steps are one 256 x 256 bit matrix, M^(2^k): the images
 * of the 256 unit states, built by squaring M k times, each image by applying the matrix so
 * far to the previous images. Applying it folds in the images of the state's set bits. */
#include "rng.h"

#include <string.h>

/* r's state advanced by the matrix m (the images of its 256 unit states) */
static void apply(const uint64_t m[256][4], uint64_t s[4]) {
    uint64_t out[4] = {0, 0, 0, 0};
    for (int b = 0; b < 256; b++)
        if (s[b / 64] >> (b % 64) & 1)
            for (int w = 0; w < 4; w++) out[w] ^= m[b][w];
    memcpy(s, out, sizeof out);
}

void sn_rng_jump_init(sn_rng_jumper *j, int log2_steps) {
    for (int b = 0; b < 256; b++) { /* M: one step of each unit state */
        sn_rng r = {{0, 0, 0, 0}};
        r.s[b / 64] = 1ull << (b % 64);
        (void)sn_rng_next(&r);
        memcpy(j->m[b], r.s, sizeof r.s);
    }
    uint64_t sq[256][4];
    for (int k = 0; k < log2_steps; k++) { /* M^(2^(k+1)) = M^(2^k) M^(2^k) */
        for (int b = 0; b < 256; b++) {
            memcpy(sq[b], j->m[b], sizeof sq[b]);
            apply(j->m, sq[b]);
        }
        memcpy(j->m, sq, sizeof sq);
    }
}

void sn_rng_jump(const sn_rng_jumper *j, sn_rng *r) { apply(j->m, r->s); }
