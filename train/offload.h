/* offload.h: the CPU's half of the optimizer step when AdamW's state lives in host memory
 * (sn_train_opts.offload, ZeRO-Offload's idea for one device): kernel.h's ADAMW over host
 * arrays. Convention: f32 arithmetic, operation for operation the order of the generated
 * kernels (codegen/llvm/llvm_optim.c), so that on the CPU device an offloaded step is the
 * device's step bit for bit; the work goes in chunks (sn_offload_chunk), each one
 * copy down (gradients) and one up (weights), the copies of one chunk overlapping the host's
 * work on another where the device copies asynchronously (runner.c). */
#ifndef SN_OFFLOAD_H
#define SN_OFFLOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "program/kernel.h"
#include "program/program.h"
#include "runtime/pool.h"

enum { SN_OFFLOAD_CHUNK = 1 << 20 }; /* the most elements a copy moves (4 MiB of f32) */
enum { SN_OFFLOAD_RING = 2 };         /* gradient chunks in flight: one copied while one is used */

/* The elements of a chunk for a flat range of n: a 16th of it, at least 4096 and at most
 * SN_OFFLOAD_CHUNK, whole cache lines (so that small models, the tests', pipeline too). */
static inline int64_t sn_offload_chunk(int64_t n) {
    int64_t c = n / 16 < 4096 ? 4096 : n / 16 > SN_OFFLOAD_CHUNK ? SN_OFFLOAD_CHUNK : n / 16;
    return (c + 63) / 64 * 64;
}

/* The f32 elements of the gradients' staging chunks in host memory for a range of n. */
static inline int64_t sn_offload_staging(int64_t n) {
    int64_t c = sn_offload_chunk(n);
    return n <= c ? n : SN_OFFLOAD_RING * c;
}

/* AdamW on n elements: p, m, v updated from g with the step's scalars h (kernel.h SN_OPT_*,
 * after CLIP wrote the clip scale); the first n_decay elements get weight decay. With low_dtype
 * SN_BF16 or SN_F16, low[i] gets the new p[i]'s bits in that dtype, rounded to nearest even
 * (kernel.h's flat_low: the weight shadows); SN_F32: low is not touched. The work is split over
 * the pool's threads (NULL: the calling thread alone); the bits do not depend on how. */
void sn_offload_adamw(sn_pool *pool, const float *h, float *p, float *m, float *v, const float *g,
                      void *low, sn_dtype low_dtype, int64_t n, int64_t n_decay);

/* sum[i] += g[i] (kernel.h's GRAD_ACC) on n elements, over the pool's threads (or NULL). */
void sn_offload_acc(sn_pool *pool, float *sum, const float *g, int64_t n);

/* One host AdamW (sn_offload_adamw, no shadows) run apart from the calling thread: the delayed
 * parameter update (runner.c), whose device step runs while the host updates. The job owns a
 * copy of the step's scalars; the arrays it reads and writes are the caller's, untouched by the
 * caller until sn_offload_job_finish returns. threaded false (a device without asynchronous
 * copies, where nothing would overlap): the job runs inside sn_offload_job_finish, as late as
 * the order allows, with the same numbers; so a caller that writes the job's arrays too early
 * gets other numbers there too, deterministically. */
/* A part of the flat range: the job updates its parts in a given order (the order the step's
 * backward frees the weights in, runner.c), so that each part can go up once it is done. */
typedef struct {
    int64_t lo, n;
} sn_offload_range;

typedef struct {
    sn_pool *pool;  /* the job's threads (NULL: its one thread) */
    bool threaded;  /* on a thread of its own from sn_offload_job_start */
    bool pending;   /* started, not finished */
    bool on_thread; /* `thread` runs it */
    pthread_t thread;
    float h[SN_OPT_SCALARS];
    float *p, *m, *v;
    const float *g;
    void *low;        /* the weight shadows' bits (sn_offload_adamw), or NULL */
    sn_dtype low_dtype;
    int64_t n, n_decay;
    const sn_offload_range *order; /* the parts in the order they are updated (NULL: all at once) */
    int n_order;
    int done;         /* of them, updated so far (under mu; cv signalled at each) */
    bool sync_made;   /* mu and cv made (at the first start) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double run_s;     /* the last job's AdamW, start to end, on whichever thread ran it */
} sn_offload_job;

/* Starts AdamW on p, m, v from g with the scalars h (copied), as sn_offload_adamw; no job may be
 * pending. order (n_order parts covering [0, n) once each; NULL: the whole range at once): the
 * parts updated in that order, each in one call of sn_offload_adamw (the same numbers: AdamW
 * updates each element alone). A thread that cannot be started: the job runs at once (the same
 * numbers). */
void sn_offload_job_start(sn_offload_job *j, const float *h, float *p, float *m, float *v,
                          const float *g, void *low, sn_dtype low_dtype, int64_t n,
                          int64_t n_decay, const sn_offload_range *order, int n_order);
/* Returns when the first `parts` parts of the pending job's order are updated (their p, m, v and
 * shadows final: the caller may read them, not write them), the whole job where it has no order;
 * at once with nothing pending. */
void sn_offload_job_wait(sn_offload_job *j, int parts);
/* Returns when the pending job is done (nothing pending: at once). */
void sn_offload_job_finish(sn_offload_job *j);
/* Finishes the job and frees what it made (not its pool). */
void sn_offload_job_free(sn_offload_job *j);

/* offload_up.c: the weights that go up after an offloaded update. A segment of the flat range
 * of training program t's layout goes up as its weight shadows' bits (low) where every trained
 * parameter in it is read only through its shadow, by t and by eval (another program on t's
 * parameters, or NULL), else in f32 (the executor casts the shadows of what goes up in f32).
 * *out (malloc'd, *n segments in order covering the range) is NULL when no segment is low:
 * everything goes up in f32, as without shadows. */
typedef struct {
    int64_t lo, n;
    bool low;
} sn_offload_seg;
sn_status sn_offload_segments(const sn_program *t, const sn_program *eval, sn_offload_seg **out,
                              int *n, sn_err *e);

/* One piece of the weights going up during a step's last run (the delayed update, runner.c):
 * [lo, lo + n) of the flat range as its shadows' bits (low) or in f32, after kernel `after` of t
 * (the last that reads or writes its device bytes, program.h sn_program_last_use; -1: none), in
 * part `part` of the update's order. */
typedef struct {
    int64_t lo, n;
    bool low;
    int after, part;
} sn_offload_piece;
/* t's flat range in chunks of `chunk` elements, each cut by seg (n_seg; NULL: all in f32) as the
 * weights go up after an update, the pieces sorted by `after` (the flat order among equals: the
 * last layers' first, as the backward frees them), and the update's order: the pieces' ranges
 * joined into parts where consecutive ones touch (*parts, *n_parts: covering the range once).
 * Both malloc'd. The runner's uploads and the offload model (bench/roofline.c) read the same. */
sn_status sn_offload_pieces(const sn_program *t, const sn_offload_seg *seg, int n_seg,
                            int64_t chunk, sn_offload_piece **pieces, int *n,
                            sn_offload_range **parts, int *n_parts, sn_err *e);

#endif
