/* cuda_launch.c: the grid, block and shared memory of every kernel kind, in one function that
 * the renderer (launch bounds, loop strides), the runtime and the simulator's tests all read.
 * Convention: the emitters never assume a block size of their own: they are handed these dims. */
#include "cuda_int.h"

static unsigned clampu(int64_t v, int64_t lo, int64_t hi) {
    return (unsigned)(v < lo ? lo : v > hi ? hi : v);
}

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

int sn_cu_row_threads(int64_t C, int lanes) { /* a vector step a thread (at least four
                                                 * elements), whole warps, at most 1024 */
    int64_t per = lanes > 4 ? lanes : 4;
    return (int)clampu(round_up((C + per - 1) / per, 32), 32, 1024);
}

/* A 1-D launch of `blocks` blocks of `threads` threads. */
static sn_cuda_dims dims1(int64_t blocks, int threads) {
    return (sn_cuda_dims){.grid = {clampu(blocks, 1, INT32_MAX), 1, 1},
                          .block = {(unsigned)threads, 1, 1}};
}

/* k's own launch (without a joined FINISH's blocks). */
static sn_cuda_dims own_dims(const sn_kernel *k, const sn_target *t) {
    const sn_node *n = k->anchor;
    switch (k->kind) {
    case SN_KER_POINTWISE: {
        int64_t steps = sn_shape_numel(k->rank, k->shape) / sn_cu_pointwise_lanes(k);
        int64_t blocks = (steps + SN_CUDA_PW_BLOCK - 1) / SN_CUDA_PW_BLOCK;
        return dims1(blocks > SN_CUDA_PW_MAX_GRID ? SN_CUDA_PW_MAX_GRID : blocks, SN_CUDA_PW_BLOCK);
    }
    case SN_KER_ROW: {
        const sn_node *x = n->in[0];
        int64_t C = x->rank ? x->shape[x->rank - 1] : 1, R = x->rank ? sn_numel(x) / C : 1;
        int64_t items;
        bool serial;
        sn_kernel_work(k, &items, &serial);
        if (k->anchor2 && k->stage == SN_SUM_FINISH) /* the classifier's: one block */
            return dims1(1, SN_CUDA_CE_FINISH_THREADS);
        if (k->stage == SN_SUM_PARTIAL && !k->anchor2) /* a block per chunk and part, a warp per row */
            return dims1(items, 8 * 32);
        if (k->stage == SN_SUM_FINISH) /* a thread per column of the partial sums */
            return dims1(items, SN_SUM_FINISH_COLS);
        if (sn_cu_row_warp_per_row(k)) /* a warp per row */
            return dims1((R + SN_CUDA_ROW_WARPS - 1) / SN_CUDA_ROW_WARPS, 32 * SN_CUDA_ROW_WARPS);
        int threads = sn_cu_row_threads(C, sn_cu_row_lanes(k));
        int by_regs = 1;
        int64_t bytes = sn_cu_row_prefetched(k, (unsigned)threads, t, &by_regs);
        if (bytes) { /* persistent: as many blocks as fit the SMs at once (all rows where their
                        count is unknown), each taking rows in turn; by registers as its launch
                        bounds ask */
            int64_t per_sm = (t->shared_max + 1024) / (bytes + 1024), by_threads = 2048 / threads;
            per_sm = per_sm < by_threads ? per_sm : by_threads;
            per_sm = per_sm < by_regs ? per_sm : by_regs;
            int64_t blocks = t->sm_count ? t->sm_count * (per_sm > 1 ? per_sm : 1) : R;
            sn_cuda_dims d = dims1(blocks < R ? blocks : R, threads);
            d.shared_bytes = (unsigned)bytes;
            return d;
        }
        return dims1(R, threads);
    }
    case SN_KER_REDUCE: {
        const sn_node *x = n->in[0];
        int axis = n->a.axis;
        int64_t d = x->shape[axis], inner = sn_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
        int64_t outer = sn_numel(x) / (d * inner);
        if (inner == 1) return dims1((outer + 7) / 8, 256); /* a warp per output */
        if (sn_cu_reduce_by_column(k)) /* a thread a column */
            return dims1(outer * ((inner + SN_CUDA_REDUCE_COLS - 1) / SN_CUDA_REDUCE_COLS),
                         SN_CUDA_REDUCE_COLS);
        /* tiles of 32 adjacent outputs, 32 x (up to 32) threads down the reduced axis */
        unsigned ty = clampu(round_up(d, 8), 8, 32);
        return (sn_cuda_dims){.grid = {clampu(outer * ((inner + 31) / 32), 1, INT32_MAX), 1, 1},
                              .block = {32, ty, 1}};
    }
    case SN_KER_GATHER:
        if (k->stage == SN_GATHER_BUCKET) /* a block per chunk, a thread per two positions */
            return dims1(sn_gather_chunks(k), (int)(sn_gather_chunk(k) / 2));
        return sn_cu_gather_rows_dims(k); /* a team a row: the embedding's or the table's */
    case SN_KER_GRAD_ACC:
    case SN_KER_ADAMW: { /* grid-stride over float4 steps */
        int64_t blocks = (k->opt.flat_n / 4 + SN_CUDA_PW_BLOCK - 1) / SN_CUDA_PW_BLOCK;
        return dims1(blocks > SN_CUDA_PW_MAX_GRID ? SN_CUDA_PW_MAX_GRID : blocks, SN_CUDA_PW_BLOCK);
    }
    case SN_KER_SQNORM: /* a block per SN_SQNORM_BLOCK elements */
        return dims1((k->opt.flat_n + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK, 256);
    case SN_KER_CLIP: return dims1(1, 256);
    case SN_KER_ATTENTION: return sn_cu_attention_dims(k, t); /* cuda_attention.c */
    case SN_KER_DEQUANT: { /* a thread a weight, grid-stride */
        int64_t blocks = (sn_numel(n) + SN_CUDA_PW_BLOCK - 1) / SN_CUDA_PW_BLOCK;
        return dims1(blocks > SN_CUDA_PW_MAX_GRID ? SN_CUDA_PW_MAX_GRID : blocks, SN_CUDA_PW_BLOCK);
    }
    case SN_KER_GEMV: return sn_cu_gemv_dims(k); /* a block per 64 columns */
    case SN_KER_THIN: return sn_cu_thin_dims(k); /* a block per `rows` rows */
    case SN_KER_GEMM: /* a library call */
    case SN_KER_KIND_COUNT: break;
    }
    return (sn_cuda_dims){0};
}

sn_cuda_dims sn_cuda_launch_dims(const sn_kernel *k, const sn_target *t) {
    SN_ASSERT(t && t->kind == SN_TARGET_CUDA);
    sn_cuda_dims d = own_dims(k, t);
    if (k->tail) { /* a joined FINISH's blocks after the host's own (cuda_tail.c) */
        SN_ASSERT(d.grid[0] == k->n_items && d.grid[1] == 1 && d.grid[2] == 1);
        d.grid[0] += (unsigned)sn_cu_tail_blocks(k, d.block[0]);
    }
    return d;
}
