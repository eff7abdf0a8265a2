/* kernel_split.c: the decode split's rule (kernel.h: SN_DECODE_BLOCKS): how many parts the
 * few-row product's k and attention_cache's keys are cut into, from the kernel's shapes alone;
 * the thin product's sum form's parts (its plan's: kernel.h); and grouped-query dk and dv's
 * parts (kernel.h: SN_DKV_PARTS_BLOCKS).
 * Convention: a kernel whose one-kernel items already reach SN_DECODE_BLOCKS is not split; else
 * the parts are at least as many as bring items x parts to the target, each part at least a
 * minimum (4 rows: a warp's; 32 k of a transposed W: 4 lanes'; 32 keys: 8 a warp), so a short K
 * or a short cache gets fewer. */
#include "program.h"

/* The rows of W a step of the CUDA kernel's block covers (8 warps of 4 rows: cuda_gemv.c), the
 * rows a warp takes at a time, and the fewest keys a part of attention_cache takes (8 a warp).
 * Transposed (cuda_gemv_t.c): a warp's step over k is 256 (32 lanes of 8); a part takes at
 * least 32 (4 lanes: fewer lanes busy would cost more than the blocks gained). */
enum { ROW_STEP = 32, ROW_WARP = 4, MIN_KEYS = 32, T_STEP = 256, T_LANES = 32 };

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* items: the one kernel's blocks; n: the rows or keys to cut into parts of *len, at least
 * `least` a part. A part's length is floor(n / want) (so the parts are at least `want` where n
 * allows), rows rounded down to whole block steps (`step`: 32 rows, 256 k transposed) where a
 * part has that many, else to a multiple of `least` (the last warps or lanes idle: a short K or
 * few columns, LLaMA's kv heads); keys not rounded (step 0). */
static int64_t rule(int64_t items, int64_t n, int64_t step, int64_t least, int64_t *len) {
    *len = n;
    if (items >= SN_DECODE_BLOCKS || n <= least) return 1;
    int64_t l = n / cdiv(SN_DECODE_BLOCKS, items);
    if (step) l = l >= step ? l / step * step : l / least * least;
    *len = l > least ? l : least;
    return cdiv(n, *len);
}

static int64_t parts_of(const sn_kernel *k, int64_t *len) {
    const sn_node *a = k->anchor;
    *len = 0;
    if (k->kind == SN_KER_GEMV) { /* the k: W's rows, or (tb) 4 lanes' 8 in a row */
        sn_gemv g = sn_gemv_of(k);
        return g.tb ? rule(cdiv(g.N, SN_GEMV_COLS), g.K, T_STEP, T_LANES, len)
                    : rule(cdiv(g.N, SN_GEMV_COLS), g.K, ROW_STEP, ROW_WARP, len);
    }
    if (k->kind == SN_KER_THIN) { /* the sum form's parts of the rows (program.c's plan) */
        sn_thin t = sn_thin_of(k);
        *len = t.rows;
        return t.sum ? t.parts : 1;
    }
    if (k->kind == SN_KER_ATTENTION && a->op == SN_OP_ATTENTION_CACHE) {
        const sn_node *q = a->in[0];
        int64_t T = q->shape[2], D = q->shape[3], S = a->in[1]->shape[2];
        return rule(sn_numel(q) / (T * D), S + T, 0, MIN_KEYS, len);
    }
    return 1;
}

int64_t sn_split_parts(const sn_kernel *k) {
    int64_t len;
    return parts_of(k, &len);
}

int64_t sn_split_len(const sn_kernel *k) {
    int64_t len;
    parts_of(k, &len);
    return len;
}

int64_t sn_att_dkv_parts(const sn_kernel *k) {
    const sn_node *a = k->anchor;
    if (k->kind != SN_KER_ATTENTION || !a ||
        (a->op != SN_OP_ATTENTION_BWD_K && a->op != SN_OP_ATTENTION_BWD_V))
        return 1;
    int64_t G = sn_attention_group(a);
    const sn_node *kk = a->in[1];
    int r = kk->rank;
    int64_t blocks = sn_shape_numel(r - 2, kk->shape) * cdiv(kk->shape[r - 2], 64);
    return G > 1 && blocks < SN_DKV_PARTS_BLOCKS ? G : 1;
}
