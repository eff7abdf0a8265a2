/* gemm_tune.c: SN_GEMM_TUNE=N, opt-in: each GEMM plan runs the fastest of the heuristic's first N
 * algorithms for its problem, timed on the device when the program is loaded (docs/gpu.md,
 * "Tuning cuBLASLt's algorithms"). Convention: candidates run only on scratch operands allocated
 * here and freed before returning, never on the program's buffers, so those hold nothing but what
 * the chosen algorithm computes on the first real run (an accum GEMM's C, which may be its D,
 * is never touched). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/clock.h"
#include "support/half.h"
#include "support/rng.h"
#include "cuda_rt.h"

enum { ALIGN = 256, FILL_BLOCK = 64 << 10 };

struct sn_gemm_tuned {
    sn_gemm_shape s;
    bool tf32;
    int chosen; /* the winner's place in the heuristic's order */
    cublasLtMatmulHeuristicResult_t winner;
};

sn_status sn_gemm_tuner_init(sn_gemm_tuner *t, sn_err *e) {
    *t = (sn_gemm_tuner){0};
    const char *v = getenv("SN_GEMM_TUNE"), *log = getenv("SN_GEMM_TUNE_LOG");
    t->log = log && *log && strcmp(log, "0");
    if (!v || !*v) return SN_OK;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n == 1 || n > SN_GEMM_TUNE_MAX)
        return sn_fail(e, SN_ERR_INVALID, "SN_GEMM_TUNE=%s: give how many of cuBLASLt's algorithms "
                       "to time for each GEMM, 2 to %d (0 or unset: the heuristic's first, "
                       "untimed)", v, SN_GEMM_TUNE_MAX);
    t->n = (int)n;
    return SN_OK;
}

void sn_gemm_tuner_free(sn_gemm_tuner *t) {
    free(t->known);
    *t = (sn_gemm_tuner){0};
}

/* Whether two problems are one to cuBLASLt: every field (offsets: the operands' alignment). */
static bool alike(const sn_gemm_shape *x, const sn_gemm_shape *y) {
    return x->ta == y->ta && x->tb == y->tb && x->M == y->M && x->N == y->N && x->K == y->K &&
           x->batch == y->batch && x->lda == y->lda && x->ldb == y->ldb && x->ldd == y->ldd &&
           x->off_a == y->off_a && x->off_b == y->off_b && x->stride_a == y->stride_a &&
           x->stride_b == y->stride_b && x->stride_d == y->stride_d && x->epi == y->epi &&
           x->accum == y->accum && x->ab == y->ab && x->d == y->d && x->bias_t == y->bias_t &&
           x->aux_t == y->aux_t && x->c_t == y->c_t && x->b_t == y->b_t;
}

/* ---- the scratch operands: one allocation, each operand at a multiple of ALIGN ---- */

typedef struct {
    CUdeviceptr base, A, B, D, bias, aux; /* D is C too (accum: in place) */
    size_t ab_bytes, bytes;               /* A's and B's part (their type), the whole */
} scratch;

static size_t up(int64_t elems, sn_dtype t) {
    size_t n = (size_t)elems * (size_t)(sn_dtype_bits(t) / 8);
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* Random values of type t in [-1, 1) over [p, p + bytes): a block from the host, doubled by
 * copies on the device (what the GEMM reads matters to its power, so not zeros). */
static sn_status fill(sn_cuda_api *a, CUstream stream, CUdeviceptr p, size_t bytes, sn_dtype t,
                      uint64_t seed, sn_err *e) {
    size_t es = (size_t)sn_dtype_bits(t) / 8, block = bytes < FILL_BLOCK ? bytes : FILL_BLOCK;
    unsigned char *h = sn_malloc(block, "scratch values for SN_GEMM_TUNE", e);
    if (!h) return SN_ERR_OOM;
    sn_rng r = sn_rng_seed(seed);
    for (size_t i = 0; i < block / es; i++) {
        float v = (float)(2 * sn_rng_uniform(&r) - 1);
        uint16_t b = t == SN_BF16 ? sn_f32_to_bf16(v) : sn_f32_to_f16(v);
        if (sn_dtype_is_f8(t)) /* codes 0x20..0x3f of either sign: finite in both formats */
            h[i] = (unsigned char)(0x20u | (sn_rng_next(&r) & 0x9fu));
        else
            memcpy(h + i * es, t == SN_F32 ? (void *)&v : (void *)&b, es);
    }
    sn_status st = SN_CUDA_CHECK(a, e, cuMemcpyHtoDAsync, p, h, block, stream);
    for (size_t done = block; !st && done < bytes; done *= 2)
        st = SN_CUDA_CHECK(a, e, cuMemcpyDtoDAsync, p + done, p, done < bytes - done ? done : bytes - done,
                           stream);
    if (!st) st = SN_CUDA_CHECK(a, e, cuStreamSynchronize, stream); /* the host block read */
    free(h);
    return st;
}

/* Scratch operands for s, filled; SN_ERR_OOM (x->base 0) when the device has no room. */
static sn_status scratch_new(sn_cuda_api *a, const sn_gemm_shape *s, CUstream stream, scratch *x,
                             sn_err *e) {
    bool ta = s->ta, tb = s->tb;
    int64_t a_rows = ta ? s->K : s->M, a_cols = ta ? s->M : s->K;
    int64_t b_rows = tb ? s->N : s->K, b_cols = tb ? s->K : s->N;
    size_t A = up(s->off_a + (a_rows - 1) * s->lda + a_cols + (s->batch - 1) * s->stride_a, s->ab);
    size_t B = up(s->off_b + (b_rows - 1) * s->ldb + b_cols + (s->batch - 1) * s->stride_b, s->ab);
    size_t D = up((s->M - 1) * s->ldd + s->N + (s->batch - 1) * s->stride_d, s->d);
    size_t bias = sn_gemm_has_bias(s->epi) ? up(s->N, s->d) : 0;
    size_t aux = sn_gemm_has_aux(s->epi) ? up(s->M * s->N, s->d) : 0;
    *x = (scratch){.ab_bytes = A + B, .bytes = A + B + D + bias + aux};
    sn_status st = SN_CUDA_CHECK(a, e, cuMemAlloc, &x->base, x->bytes);
    if (st) {
        x->base = 0;
        return st;
    }
    x->A = x->base;
    x->B = x->A + A;
    x->D = x->B + B;
    x->bias = bias ? x->D + D : 0;
    x->aux = aux ? x->D + D + bias : 0;
    st = fill(a, stream, x->base, x->ab_bytes, s->ab, 1, e);
    if (!st) st = fill(a, stream, x->D, x->bytes - x->ab_bytes, s->d, 2, e);
    return st;
}

/* ---- timing ---- */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The median seconds of SN_GEMM_TUNE_REPS runs of the plan's algorithm on x, each between two
 * of ev, after one run to warm up; *ran false (SN_OK) when cuBLASLt refuses to run it. */
static sn_status time_runs(sn_cuda_api *a, cublasLtHandle_t h, const sn_gemm_plan *p,
                           const scratch *x, const CUevent *ev, CUstream stream,
                           CUdeviceptr ws, size_t ws_bytes, bool *ran, double *median, sn_err *e) {
    bool tf32;
    const sn_gemm_shape *s = sn_gemm_plan_shape(p, &tf32);
    sn_err refused;
    sn_status st = SN_OK;
    *ran = false;
    for (int i = 0; i <= SN_GEMM_TUNE_REPS; i++) {
        if (i && (st = SN_CUDA_CHECK(a, e, cuEventRecord, ev[i - 1], stream))) return st;
        if (sn_gemm_plan_run(a, h, p, x->D, x->A, x->B, x->bias, x->aux, s->accum ? x->D : 0, ws,
                             ws_bytes, stream, &refused))
            return SN_OK;
    }
    if ((st = SN_CUDA_CHECK(a, e, cuEventRecord, ev[SN_GEMM_TUNE_REPS], stream)) ||
        (st = SN_CUDA_CHECK(a, e, cuEventSynchronize, ev[SN_GEMM_TUNE_REPS])))
        return st;
    double t[SN_GEMM_TUNE_REPS];
    for (int i = 0; i < SN_GEMM_TUNE_REPS && !st; i++) {
        float ms = 0;
        st = SN_CUDA_CHECK(a, e, cuEventElapsedTime, &ms, ev[i], ev[i + 1]);
        t[i] = ms * 1e-3;
    }
    if (st) return st;
    qsort(t, SN_GEMM_TUNE_REPS, sizeof t[0], cmp_double);
    *median = t[SN_GEMM_TUNE_REPS / 2];
    *ran = true;
    return SN_OK;
}

/* SN_GEMM_TUNE_LOG's line for one problem. */
static void log_line(const sn_gemm_shape *s, bool tf32, const sn_gemm_tune_result *r,
                     size_t scratch_bytes) {
    char what[160], b[32];
    snprintf(what, sizeof what, "%lld x %lld x %lld%s%s, batch %lld, %s into %s%s, epilogue %s%s",
             (long long)s->M, (long long)s->N, (long long)s->K, s->ta ? ", A^T" : "",
             s->tb ? ", B^T" : "", (long long)s->batch, sn_dtype_name(s->ab), sn_dtype_name(s->d),
             tf32 ? " (TF32)" : "", sn_epilogue_name(s->epi), s->accum ? " + C" : "");
    if (r->no_scratch)
        fprintf(stderr, "sinter: gemm tune: %s: no room for %s of scratch operands: the "
                "heuristic's first kept, untimed\n", what,
                sn_bytes_str((int64_t)scratch_bytes, b, sizeof b));
    else if (r->first_s > 0)
        fprintf(stderr, "sinter: gemm tune: %s: the heuristic's first %.2f us, #%d %.2f us "
                "(%.3fx), %d of %d candidates ran\n", what, r->first_s * 1e6, r->chosen,
                r->chosen_s * 1e6, r->first_s / r->chosen_s, r->ran, r->tried);
    else
        fprintf(stderr, "sinter: gemm tune: %s: the heuristic's first did not run, #%d %.2f us, "
                "%d of %d candidates ran\n", what, r->chosen, r->chosen_s * 1e6, r->ran, r->tried);
}

sn_status sn_gemm_tune(sn_gemm_tuner *t, sn_cuda_api *a, cublasLtHandle_t handle, sn_gemm_plan *p,
                       CUstream stream, CUdeviceptr workspace, size_t workspace_bytes,
                       sn_gemm_tune_result *r, sn_err *e) {
    sn_gemm_tune_result unused;
    r = r ? r : &unused;
    *r = (sn_gemm_tune_result){0};
    if (t->n < 2) return SN_OK;
    bool tf32;
    const sn_gemm_shape *s = sn_gemm_plan_shape(p, &tf32);
    for (int i = 0; i < t->n_known; i++)
        if (t->known[i].tf32 == tf32 && alike(&t->known[i].s, s)) {
            sn_gemm_plan_use(p, &t->known[i].winner);
            r->known = true;
            r->chosen = t->known[i].chosen;
            return SN_OK;
        }
    double t0 = sn_clock_s();
    cublasLtMatmulHeuristicResult_t cand[SN_GEMM_TUNE_MAX];
    sn_status st = sn_gemm_plan_candidates(a, handle, p, t->n, cand, &r->tried, e);
    if (st || r->tried == 0) return st; /* none: the plan keeps its own */
    scratch x;
    st = scratch_new(a, s, stream, &x, e);
    if (st == SN_ERR_OOM) { /* the heuristic's first (the plan's) stays */
        r->no_scratch = true;
        if (t->log) log_line(s, tf32, r, x.bytes);
        return x.base ? SN_CUDA_CHECK(a, e, cuMemFree, x.base) : SN_OK;
    }
    CUevent ev[SN_GEMM_TUNE_REPS + 1] = {0};
    for (int i = 0; i <= SN_GEMM_TUNE_REPS && !st; i++)
        st = SN_CUDA_CHECK(a, e, cuEventCreate, &ev[i], CU_EVENT_DEFAULT);
    int best = -1;
    for (int i = 0; i < r->tried && !st; i++) {
        bool ran = false;
        double sec = 0;
        if (cand[i].state != CUBLAS_STATUS_SUCCESS) continue;
        sn_gemm_plan_use(p, &cand[i]);
        st = time_runs(a, handle, p, &x, ev, stream, workspace, workspace_bytes, &ran, &sec, e);
        if (st || !ran) continue;
        r->ran++;
        if (i == 0) r->first_s = sec;
        if (best < 0 || sec < r->chosen_s) { /* strictly: a tie keeps the earlier */
            best = i;
            r->chosen_s = sec;
        }
    }
    for (int i = 0; i <= SN_GEMM_TUNE_REPS; i++)
        if (ev[i]) a->cuEventDestroy(ev[i]);
    if (x.base) a->cuMemFree(x.base); /* synchronises: the scratch is not read after */
    r->chosen = best < 0 ? 0 : best;
    sn_gemm_plan_use(p, &cand[r->chosen]);
    if (st) return st;
    sn_gemm_tuned *k = sn_realloc(t->known, (size_t)(t->n_known + 1) * sizeof *k,
                                  "the GEMMs SN_GEMM_TUNE timed", e);
    if (!k) return SN_ERR_OOM;
    t->known = k;
    t->known[t->n_known++] = (sn_gemm_tuned){.s = *s, .tf32 = tf32, .chosen = r->chosen,
                                                      .winner = cand[r->chosen]};
    t->timed++;
    t->switched += r->chosen != 0;
    t->seconds += sn_clock_s() - t0;
    if (t->log) log_line(s, tf32, r, x.bytes);
    return SN_OK;
}
