/* cuda_row.h: what the row-kernel renderers share (cuda_row_pass.c: the passes over a row;
 * cuda_row.c: the ops a block per row; cuda_row_sums.c: the ops that sum over every row,
 * PARTIAL and FINISH).
 * Convention: a renderer fills one `row` from its kernel (cuda_row.c's setup) and writes the
 * kernel's body through it; E() appends a line of CUDA C to w->t. */
#ifndef SN_CUDA_ROW_H
#define SN_CUDA_ROW_H

#include "cuda_int.h"

typedef struct {
    sn_cu_text *t;
    const sn_kernel *k;
    const sn_node *n;   /* the row op */
    int64_t C, R, Vr;   /* row length, rows, real classes (cross-entropy) */
    bool fused;         /* prologue/epilogue instructions (k->n_instr > 0) */
    bool dep[SN_KER_MAX_INSTR]; /* [n_instr]: depends on the row op's value (the plan's) */
    int buf[3];         /* arg read as is for operand i (-1: computed per element) */
    int y;              /* the output holding the row op's own result, or -1 */
    unsigned threads;
    /* a pass's first column step and stride (in steps), the row's sum and max: a block per row
       ("threadIdx.x", threads, sn_block_sum, sn_block_max) or a warp ("lane", 32, sn_warp_...) */
    const char *first, *bsum, *bmax;
    unsigned stride;
    const char *ix;     /* the index type */
    bool exp_fast;      /* the kernel reads 16-bit inputs: its exponentials on the SFU */
    int lanes;          /* columns a step of a pass (sn_cu_row_lanes): 8, 4, or 1 */
    bool vec;           /* inside the lane loop of a vector step */
    unsigned declared;  /* in a vector step: the outputs collected in out<o>_v[] */
    unsigned pending;   /* those of them the step has stored into */
    int out0;           /* the first output the passes store (after the norm backward pair's sums) */
    bool lanes_closed;  /* the pass's loop over the lanes ended (sn_cu_row_close_lanes) */
    /* the row kept in registers (sn_cu_row_cache_begin): the row op's per-element operands,
       loaded once before the first pass, read back by every pass */
    bool cache_allowed; /* the target keeps rows in registers (sn_target row_cache) */
    int sm;             /* the target's compute capability x10 (the cache's budget) */
    int cache_steps;    /* steps of lanes x stride columns a thread takes (0: no cache) */
    int n_cache;
    char cache_var[3][48]; /* the variables kept: rc<c>[] holds cache_var[c] */
    bool cache_half[3];    /* kept two to a 32-bit word (bf16 values as loaded) */
    bool cache_filled;     /* the row has been loaded into them */
    int pass_cache;        /* CACHE_NONE, CACHE_FILL (the loading loop) or CACHE_USE (a pass) */
    bool pass_guard;       /* the open pass's steps test their first column against its end */
    int first_step;        /* the next pass over the cache starts at this step (sn_cu_row_cache_max) */
    /* the next row prefetched into shared memory (sn_cu_row_prefetch_plan) */
    int64_t shared_max; /* the target's shared memory a block can opt into */
    bool prefetch_allowed; /* the target's row_prefetch */
    bool prefetch;      /* planned: the block takes rows in turn, the next one copied ahead */
    int pf_arg;         /* the kept value's buffer (bf16 bits as stored, rows contiguous) */
    /* in a pass reading the cache: what it still computes (cuda_row_pass.c prune) */
    bool live_instr[SN_KER_MAX_INSTR];
    uint64_t live_access; /* bit a: access a */
} row;

#define E(...) sn_cu_emitf(w->t, __VA_ARGS__)

/* The outputs a pass stores: those that do not depend on the row op (the prologue's), or
 * every output (the pass that writes the row op's result). */
enum { STORES_NONE, STORES_PROLOGUE, STORES_ALL };

/* cuda_row_pass.c: the passes over a row (each documented there) */
const char *sn_cu_row_opnd(const row *w, int i, char *b, size_t len);
void sn_cu_row_coords(row *w);
void sn_cu_row_vector_loads(row *w);
void sn_cu_row_element(row *w);
void sn_cu_row_store_prologue(row *w);
void sn_cu_row_open_pass(row *w, const char *first, int64_t end, unsigned threads, int stores);
void sn_cu_row_close_pass(row *w);
/* In a vector pass that stores nothing: ends the loop over the lanes, so that what follows runs
 * once a vector (columns j0 .. j0 + lanes - 1, those before the pass's end), before
 * sn_cu_row_close_pass ends the pass. */
void sn_cu_row_close_lanes(row *w);
/* In an element block: the row op's result at (r, j) is `val`; the epilogue follows it and
 * every output is stored. */
void sn_cu_row_store(row *w, const char *val);
/* The row kept in registers, for a row op whose passes read its per-element operands again
 * (the norms, their backwards, softmax, the classifier): after begin, the row is loaded once
 * before the first pass (every step's loads before any use), each operand's value into
 * rc<c>[step lanes + l] (two a word where it is a bf16 value as loaded), and the passes over
 * [0, C) (first, stride as w's) take their steps fully unrolled, reading the values from there
 * and emitting only what their stores and epilogue still need (the epilogue's own accesses).
 * Every operand is kept or none: none where the registers would exceed the budget for the kernel
 * (cuda_row_pass.c), a warp's row takes more than SN_ROW_CACHE_STEPS steps (unrolled, the
 * loads of what is not kept, the epilogue's accesses and the norm weights, spilled: the
 * tinyllama's rmsnorm backward in 8 steps), or the passes are not vectors (sn_cu_row_lanes
 * 1): then each pass reads the row as before. end: before an element block outside the
 * passes. */
enum { SN_ROW_CACHE_STEPS = 4 };
void sn_cu_row_cache_begin(row *w);
/* Whether the kernel's row op keeps its row (begin would keep something), before any text. */
bool sn_cu_row_cache_planned(row *w);
void sn_cu_row_cache_end(row *w);
/* The row loaded into the cache here, if kept and not yet (else the first pass does it). */
void sn_cu_row_cache_fill(row *w);
enum { CACHE_NONE, CACHE_FILL, CACHE_USE };
/* Where operand `x` is kept as bf16 pairs: `mx` = fmaxf(mx, the max of x over the steps wholly
 * before column `end`), two at a time on the pairs as kept (sn_bf16x2_max: a fifth of the
 * instructions of unpacking each and a max), and true: the next pass (the max over the rest)
 * starts after them. False, and nothing written, where x is not kept so. */
bool sn_cu_row_cache_max(row *w, const char *x, int64_t end, const char *mx);
/* The row prefetched into shared memory (the classifier: its 100 KB of bf16 logits a row kept
 * in registers leave one block of 1024 threads an SM, which loaded nothing while it summed its
 * row, so DRAM idled for the summing; now the block is persistent and copies its next row into
 * shared memory with cp.async while it works on this one, then takes it into the registers from
 * there). Planned (true) where the cache keeps one operand, bf16 as the row's buffer stores it
 * (its 16-byte vectors are the cache's words as they are: no widening, no packing), rows
 * contiguous, a block a row (threads as stride), cp.async (sm_80 and up), and the row fits the
 * target's shared memory (it takes one row's bf16, 2 C bytes). Before any text, after setup
 * with threads, first, stride, cache_allowed, sm and shared_max set. */
bool sn_cu_row_prefetch_plan(row *w);
/* With `r` naming a row (below R): its kept operand copied into the shared `next_row` (its
 * loads committed as one group; nothing read yet). */
void sn_cu_row_prefetch_issue(row *w, const char *r);
/* After sn_cu_row_cache_begin, in the loop over the block's rows: the copy waited for, the
 * kept words taken from `next_row` (zeros past the row's end; each thread reads the chunks it
 * copied), a barrier before the next copy overwrites them; the cache counts as filled. */
void sn_cu_row_cache_fill_shared(row *w);

/* The cache's steps wholly before column `end` (each step's columns a constant after unrolling:
 * a test against end can name them, `cs < whole`, and fold away there). */
int64_t sn_cu_row_whole_steps(const row *w, int64_t end);

/* cuda_row.c: e^(x - m) once the row's max m is final: sn_cu_row_exp_base declares m in base 2
 * (m_l2) where exp_fast, then each exponential is one fma and the SFU's 2^x (sn_exp2; expf where
 * not: 9 instructions, a subtraction before); the text is written into b. */
void sn_cu_row_exp_base(row *w, const char *m);
const char *sn_cu_row_exp_sub(const row *w, const char *x, const char *m, char *b, size_t len);

/* cuda_row_sums.c: a PARTIAL kernel's chunk of rows (and its column-sum parts), the ops that
 * sum over every row, and the FINISH kernel */
void sn_cu_row_partial_open(row *w);
void sn_cu_row_cross_entropy(row *w);
void sn_cu_row_norm_bwd_w(row *w, bool rms);
/* The norm backward pair (kernel.h): its head (a block per chunk, the rows a warp at a time: the
 * loop over the warp's rows opened, each warp's dy xhat sums `dw` in shared memory), and its
 * tail (the warps' sums and the column sums into the chunk's partial sums). */
void sn_cu_row_pair_open(row *w);
void sn_cu_row_pair_close(row *w);
/* The floats between two groups of the pair's warp sums (cuda_row_sums.c). */
int sn_cu_row_pair_pitch(const row *w);
/* Steps of 32 lanes x w->lanes columns a row takes. */
int64_t sn_cu_row_steps(const row *w);
/* FINISH: a kernel, or (tail) a joined FINISH's device function (cuda_tail.c) */
void sn_cu_row_finish(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname,
                      bool tail);

#endif
