/* cuda_reduce.c: sum, mean, max and amax (the max of |x|: the fp8 pass's scales) over one axis, x seen as (outer, d, inner) -> (outer, inner).
 * Contiguous reductions (inner == 1) take a warp per output, lanes striding the row, a shuffle
 * tree at the end. Column reductions over a few rows (d <= SN_CUDA_REDUCE_ROWS: GPT-2's
 * position-embedding gradient, the batch's 16 rows of (T, C)) take a thread a column, its rows'
 * loads issued together and added in order (the CPU's order: bit for bit). Longer ones (the
 * bias gradients, (B*T, C) -> (C)) are tiled: a block of 32 x ty threads owns 32 adjacent
 * outputs, thread (x, y) sums rows y, y + ty, ... of column x, and the ty partial sums meet in
 * shared memory, added in y order by the first row of threads: two levels, no atomics, the
 * same result in every run. */
#include <stdio.h>

#include "cuda_int.h"

/* acc = acc op v: a sum, or a max with NaN propagating (the reference's) */
static void combine(sn_cu_text *t, bool max, const char *v) {
    if (max) sn_cu_emitf(t, "acc = sn_max_nan(acc, %s);", v);
    else sn_cu_emitf(t, "acc += %s;", v);
}

/* The value an element of x adds: its load, or for amax the load's magnitude (the partial
 * results met later are magnitudes already). */
static void element(char *buf, size_t len, const sn_node *n, const char *xs, const char *index) {
    snprintf(buf, len, n->op == SN_OP_AMAX ? "fabsf(sn_load(%s[%s]))" : "sn_load(%s[%s])", xs, index);
}

bool sn_cu_reduce_by_column(const sn_kernel *k) {
    const sn_node *x = k->anchor->in[0];
    int axis = k->anchor->a.axis;
    int64_t inner = sn_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
    return inner > 1 && x->shape[axis] <= SN_CUDA_REDUCE_ROWS;
}

void sn_cu_emit_reduce(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *dm, const char *fname) {
    const sn_node *n = k->anchor, *x = n->in[0];
    int axis = n->a.axis;
    int64_t d = x->shape[axis], inner = sn_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
    int64_t outer = sn_numel(x) / (d * inner);
    bool max = n->op == SN_OP_MAX || n->op == SN_OP_AMAX;
    const char *ix = sn_cu_index_type(sn_numel(x) + 1024 * 1024);
    /* amax's identity 0: every magnitude is at least that (NaN still wins: sn_max_nan) */
    const char *id = n->op == SN_OP_MAX ? "-SN_INF" : "0.0f";
    char xs[16];
    int in = k->n_out; /* x's arg */
    while (k->args[in] != x) in++;
    sn_cu_arg_name(k, in, xs, sizeof xs);
    sn_cu_emit_signature(t, k, fname, (int)(dm->block[0] * dm->block[1]));
    sn_cu_emitf(t, "/* %s over (%lld, %lld, %lld) -> (%lld, %lld) */", sn_op_name(n->op),
                (long long)outer, (long long)d, (long long)inner, (long long)outer, (long long)inner);
    if (inner == 1) {
        sn_cu_emitf(t, "const %s o = (%s)blockIdx.x * %u + threadIdx.x / 32; /* a warp's output */",
                    ix, ix, dm->block[0] / 32);
        sn_cu_emitf(t, "if (o >= %lld) return;", (long long)outer);
        sn_cu_emitf(t, "float acc = %s;", id);
        sn_cu_emitf(t, "for (%s i = threadIdx.x %% 32; i < %lld; i += 32) {", ix, (long long)d);
        char at[128], index[64];
        snprintf(index, sizeof index, "o * %lld + i", (long long)d);
        element(at, sizeof at, n, xs, index);
        combine(t, max, at);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "for (int s = 16; s > 0; s >>= 1) {");
        sn_cu_emitf(t, "const float other = __shfl_xor_sync(0xffffffffu, acc, s);");
        combine(t, max, "other");
        sn_cu_emitf(t, "}");
        if (n->op == SN_OP_MEAN) sn_cu_emitf(t, "acc /= %lld.0f;", (long long)d);
        sn_cu_emitf(t, "if (threadIdx.x %% 32 == 0) sn_store(&out0[o], acc);");
        sn_cu_emitf(t, "}");
        return;
    }
    if (sn_cu_reduce_by_column(k)) { /* a thread a column: (a 16-row sum took 51 us on the H200
                                          as tiles, 3.3x the time of its bytes) */
        int64_t cols = (inner + SN_CUDA_REDUCE_COLS - 1) / SN_CUDA_REDUCE_COLS;
        sn_cu_emitf(t, "const %s o = blockIdx.x / %lld; /* the outer index */", ix, (long long)cols);
        sn_cu_emitf(t, "const %s c = (%s)(blockIdx.x %% %lld) * %d + threadIdx.x; /* the column */",
                    ix, ix, (long long)cols, SN_CUDA_REDUCE_COLS);
        sn_cu_emitf(t, "if (c >= %lld) return;", (long long)inner);
        sn_cu_emitf(t, "float acc = %s;", id);
        sn_cu_emitf(t, "#pragma unroll /* the rows' loads issued together, added in order */");
        sn_cu_emitf(t, "for (int i = 0; i < %lld; i++) {", (long long)d);
        char at[128], index[64];
        snprintf(index, sizeof index, "(o * %lld + i) * %lld + c", (long long)d, (long long)inner);
        element(at, sizeof at, n, xs, index);
        combine(t, max, at);
        sn_cu_emitf(t, "}");
        if (n->op == SN_OP_MEAN) sn_cu_emitf(t, "acc /= %lld.0f;", (long long)d);
        sn_cu_emitf(t, "sn_store(&out0[o * %lld + c], acc);", (long long)inner);
        sn_cu_emitf(t, "}");
        return;
    }
    unsigned ty = dm->block[1];
    int64_t tiles = (inner + 31) / 32;
    sn_cu_emitf(t, "const %s o = blockIdx.x / %lld; /* the outer index */", ix, (long long)tiles);
    sn_cu_emitf(t, "const %s c = (%s)(blockIdx.x %% %lld) * 32 + threadIdx.x; /* the column */", ix,
                ix, (long long)tiles);
    sn_cu_emitf(t, "float acc = %s;", id);
    sn_cu_emitf(t, "if (c < %lld) {", (long long)inner);
    sn_cu_emitf(t, "for (%s i = threadIdx.y; i < %lld; i += %u) {", ix, (long long)d, ty);
    char at[128], index[64];
    snprintf(index, sizeof index, "(o * %lld + i) * %lld + c", (long long)d, (long long)inner);
    element(at, sizeof at, n, xs, index);
    combine(t, max, at);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "SN_SHARED2(float, partial, %u, 32);", ty);
    sn_cu_emitf(t, "partial[threadIdx.y][threadIdx.x] = acc;");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "if (threadIdx.y == 0 && c < %lld) {", (long long)inner);
    sn_cu_emitf(t, "for (int y = 1; y < %u; y++) {", ty);
    combine(t, max, "partial[y][threadIdx.x]");
    sn_cu_emitf(t, "}");
    if (n->op == SN_OP_MEAN) sn_cu_emitf(t, "acc /= %lld.0f;", (long long)d);
    sn_cu_emitf(t, "sn_store(&out0[o * %lld + c], acc);", (long long)inner);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
