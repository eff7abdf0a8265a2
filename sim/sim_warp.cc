// sim_warp.cc: shuffles, votes, mma.sync and ldmatrix on top of sim_exchange. Convention:
// fragments as the PTX ISA lays them out: lane = 4 groupID + threadID_in_group, and the low 16
// bits of a register hold the element of lower column (A, C) or row (B) index.
#include <math.h>
#include <string.h>

#include "sim_internal.h"

/* what lanes meeting in a collective must agree on (plus 16 x the form, for mma and ldmatrix) */
enum { KIND_SHFL = 1, KIND_VOTE, KIND_MMA, KIND_LDMATRIX };

unsigned sim_shfl(int mode, unsigned mask, unsigned value, int arg, int width, int line) {
    if (width < 1 || width > 32 || (width & (width - 1)))
        sim_fail(line, "shuffle width %d is not a power of two from 1 to 32", width);
    unsigned all[32];
    sim_exchange(KIND_SHFL, mask, &value, all, sizeof value, line);
    int lane = (int)sim_lane(), seg = lane & ~(width - 1), src = lane;
    switch (mode) {
    case 0: src = seg + (arg & (width - 1)); break;
    case 1: src = lane - arg >= seg ? lane - arg : lane; break;
    case 2: src = lane + arg < seg + width ? lane + arg : lane; break;
    default: src = lane ^ arg; if (src >= seg + width) src = lane; break;
    }
    unsigned named = mask & sim_warp_lanes();
    if (src < 0 || src > 31 || !(named >> src & 1))
        sim_fail(line, "a shuffle reads lane %d, which is not in its mask 0x%08x (the value "
                 "would be undefined on a GPU)", src, mask);
    return all[src];
}

unsigned sim_ballot(unsigned mask, int pred, int line) {
    unsigned all[32], b = 0, named;
    sim_exchange(KIND_VOTE, mask, &pred, all, sizeof pred, line);
    named = mask & sim_warp_lanes();
    for (int j = 0; j < 32; j++)
        if (named >> j & 1 && all[j]) b |= 1u << j;
    return b;
}

unsigned sim_activemask(void) { return sim_warp_lanes(); }

static float bf16_value(unsigned bits) {
    unsigned u = (bits & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float f16_value(unsigned bits) {
    unsigned h = bits & 0xffffu, sign = h >> 15, exp = h >> 10 & 31, man = h & 1023;
    float v = exp == 0 ? ldexpf((float)man, -24)
            : exp == 31 ? (man ? NAN : INFINITY)
            : ldexpf((float)(man | 1024), (int)exp - 25);
    return sign ? -v : v;
}

/* One lane's operands of an mma. */
struct mma_regs {
    unsigned a[4], b[2];
    float c[4];
};

/* d = A B + C for the lane running, from every lane's fragments. */
void sim_mma(int shape, float *d, const unsigned *a, const unsigned *b, const float *c,
                int line) {
    const int k_dim = shape == 2 ? 8 : 16;
    const int na = shape == 2 ? 2 : 4, nb = shape == 2 ? 1 : 2;
    mma_regs mine = {}, all[32];
    memcpy(mine.a, a, sizeof(unsigned) * (size_t)na);
    memcpy(mine.b, b, sizeof(unsigned) * (size_t)nb);
    memcpy(mine.c, c, sizeof mine.c);
    sim_exchange(KIND_MMA + 16 * shape, 0xffffffffu, &mine, all, sizeof mine, line);
    if (sim_warp_lanes() != 0xffffffffu)
        sim_fail(line, "mma.sync in a warp of fewer than 32 threads");
    float (*value)(unsigned) = shape == 0 ? bf16_value : f16_value;
    float A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        int g = lane >> 2, t = lane & 3;
        const mma_regs &r = all[lane];
        /* a[i]: row g (+8 if i odd), columns 2t, 2t+1 (+8 if i >= 2) */
        for (int i = 0; i < na; i++) {
            int row = g + (i & 1) * 8, col = 2 * t + (i >> 1) * 8;
            A[row][col] = value(r.a[i]);
            A[row][col + 1] = value(r.a[i] >> 16);
        }
        for (int i = 0; i < nb; i++) { /* b[i]: rows 2t, 2t+1 (+8 if i = 1), column g */
            int row = 2 * t + i * 8;
            B[row][g] = value(r.b[i]);
            B[row + 1][g] = value(r.b[i] >> 16);
        }
    }
    int lane = (int)sim_lane(), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) { /* d[i]: row g (+8 if i >= 2), column 2t (+1 if i odd) */
        int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
        float acc = c[i];
        for (int k = 0; k < k_dim; k++) acc += A[row][k] * B[k][col]; /* products are exact */
        d[i] = acc;
    }
}

/* Whether [p, p + n) lies in the block's shared memory. */
static bool in_shared(const launch *l, const void *p, size_t n) {
    const unsigned char *q = (const unsigned char *)p;
    return q >= l->shared && q + n <= l->shared + l->shared_cap;
}

void sim_ldmatrix(int n, int trans, unsigned *r, const void *row, int line) {
    const void *rows[32];
    sim_exchange(KIND_LDMATRIX + 16 * (2 * n + trans), 0xffffffffu, &row, rows, sizeof row, line);
    if (sim_warp_lanes() != 0xffffffffu)
        sim_fail(line, "ldmatrix in a warp of fewer than 32 threads");
    launch *l = sim_current();
    for (int j = 0; j < 8 * n; j++) {
        if (!in_shared(l, rows[j], 16))
            sim_fail(line, "ldmatrix: lane %d's row address %p is not 16 bytes of this block's "
                     "shared memory", j, rows[j]);
        if ((size_t)rows[j] % 16)
            sim_fail(line, "ldmatrix: lane %d's row address %p is not 16-byte aligned", j,
                     rows[j]);
    }
    int lane = (int)sim_lane(), g = lane >> 2, t = lane & 3;
    if (l->prof && lane < 8 * n) sim_profile_ldmatrix(row, n, line); /* the rows it names */
    for (int m = 0; m < n; m++) { /* matrix m: rows from lanes 8m .. 8m+7 */
        unsigned short e[2];
        for (int i = 0; i < 2; i++) {
            /* plain: row g, columns 2t, 2t+1; transposed: rows 2t, 2t+1, column g */
            int rr = trans ? 2 * t + i : g, cc = trans ? g : 2 * t + i;
            memcpy(&e[i], (const unsigned char *)rows[8 * m + rr] + 2 * cc, 2);
        }
        r[m] = (unsigned)e[0] | (unsigned)e[1] << 16;
    }
}
