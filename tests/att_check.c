/* att_check.c: the CUDA attention tests' harness (att_check.h): host buffers of 16-bit values,
 * the simulator's runs of a program's attention kernels against the interpreter, one case's
 * graph, NVRTC's report. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pipeline.h"
#include "sim/sim.h"
#include "att_check.h"
#include "harness.h"

/* ---- 16-bit values ---- */

static uint16_t bf16_bits(double v) { /* v representable in bf16 */
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static double bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f16_bits(double v) { /* v representable in f16, finite */
    uint16_t sign = v < 0 ? 0x8000u : 0;
    double a = fabs(v);
    if (a == 0) return sign;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): exponent e - 1 */
    if (e - 1 < -14) return (uint16_t)(sign | (uint16_t)ldexp(a, 24)); /* subnormal */
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) |
                      (uint16_t)(ldexp(a, 11 - e) - 1024));
}

static double f16_value(uint16_t b) {
    int e = b >> 10 & 0x1f, m = b & 0x3ff;
    double a = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
    return b & 0x8000u ? -a : a;
}

/* ---- host buffers of a kernel's args ---- */

typedef struct {
    void *p;
    size_t bytes;
    sn_dtype dt;
    int64_t n;
} tbuf;

static void tbuf_new(tbuf *b, const sn_node *x) {
    b->dt = x->dtype;
    b->n = sn_numel(x);
    b->bytes = (size_t)b->n * (size_t)sn_dtype_bits(x->dtype) / 8;
    b->p = aligned_alloc(64, (b->bytes + 63) / 64 * 64);
    ck_assert(b->p);
}

static void tbuf_put(tbuf *b, const double *v) {
    for (int64_t i = 0; i < b->n; i++) {
        double r = sn_dtype_round(b->dt, v[i]);
        if (b->dt == SN_F32) ((float *)b->p)[i] = (float)r;
        else if (b->dt == SN_BF16) ((uint16_t *)b->p)[i] = bf16_bits(r);
        else ((uint16_t *)b->p)[i] = f16_bits(r);
    }
}

static double tbuf_get(const tbuf *b, int64_t i) {
    if (b->dt == SN_F32) return ((const float *)b->p)[i];
    uint16_t x = ((const uint16_t *)b->p)[i];
    return b->dt == SN_BF16 ? bf16_value(x) : f16_value(x);
}

/* max |got - want| / max|want| (NaN if any value is NaN). */
static double norm_err(const tbuf *b, const double *want) {
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < b->n; i++) {
        double g = tbuf_get(b, i), d = fabs(g - want[i]);
        if (isnan(g)) return NAN;
        if (d > num) num = d;
        if (fabs(want[i]) > den) den = fabs(want[i]);
    }
    return num / den;
}

/* ---- running a program's attention kernels on the simulator ---- */

static double tolerance(sn_dtype dt) {
    /* unit roundoff u: 2^-24 (f32 storage, the error is f32 arithmetic's), 2^-8 (bf16), 2^-11
     * (f16); P and dS are rounded to the operand type before their products and the outputs
     * are rounded once more, so a few u of the largest value */
    return dt == SN_F32 ? 1e-5 : dt == SN_BF16 ? 4.0 / 256 : 4.0 / 2048;
}

/* Renders p's attention kernels (want of them) for tg, runs them in every thread order on the
 * interpreter's values of their inputs, in the program's order (the atomic dq's three kernels
 * share a scratch, poisoned before each order's first), and compares each output a kernel
 * writes with the interpreter's. */
void run_attention(const sn_program *p, const sn_interp *it, const sn_target *tg, int want,
                          const char *label, run_result *res) {
    enum { MAX_K = 8 };
    const sn_kernel *ks[MAX_K];
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ATTENTION) {
            ck_assert_int_lt(n, MAX_K);
            ks[n++] = p->kernels[i];
        }
    ck_assert_int_eq(n, want);
    sn_cuda_source cs;
    sn_err e;
    ck_assert_msg(sn_cuda_render(ks, n, tg, &cs, &e) == SN_OK, "%s", e.msg);
    char *src = cs.src;
    if (res->needle) {
        src = sn_test_replace_first(cs.src, res->needle, res->plant);
        free(cs.src);
        cs.src = src;
    }
    sn_sim_module *m;
    ck_assert_msg(sn_sim_module_load(src, &m, &e) == SN_OK, "%s", e.msg);
    tbuf buf[MAX_K][SN_KER_MAX_ARGS];
    void *ptrs[MAX_K][SN_KER_MAX_ARGS + 1];
    void *scratch[MAX_K] = {0}; /* by kernel: its scratch (shared: the first kernel's) */
    size_t scratch_bytes[MAX_K] = {0};
    for (int ki = 0; ki < n; ki++) {
        const sn_kernel *k = ks[ki];
        for (int a = 0; a < k->n_out + k->n_in; a++) {
            tbuf_new(&buf[ki][a], k->args[a]);
            ptrs[ki][a] = buf[ki][a].p;
            if (a >= k->n_out) {
                const double *v = sn_interp_value(it, k->args[a]);
                ck_assert_msg(v, "no reference value of %%%d", k->args[a]->id);
                tbuf_put(&buf[ki][a], v);
            }
        }
        if (k->stage == SN_SUM_WHOLE) continue;
        for (int kj = 0; kj < ki && !scratch[ki]; kj++)
            if (ks[kj]->stage != SN_SUM_WHOLE && ks[kj]->scratch == k->scratch) scratch[ki] = scratch[kj];
        if (!scratch[ki]) {
            scratch_bytes[ki] = (size_t)p->values[k->scratch].bytes;
            ck_assert(scratch[ki] = aligned_alloc(64, (scratch_bytes[ki] + 63) / 64 * 64));
        }
        ptrs[ki][k->n_out + k->n_in] = scratch[ki];
    }
    for (int order = 0; order < SN_SIM_ORDER_COUNT; order++) {
        for (int ki = 0; ki < n; ki++)
            if (scratch_bytes[ki]) memset(scratch[ki], 0x7f, scratch_bytes[ki]);
        for (int ki = 0; ki < n; ki++) {
            const sn_kernel *k = ks[ki];
            void *params[SN_KER_MAX_ARGS + 1];
            for (int a = 0; a < k->n_out + k->n_in + (k->stage != SN_SUM_WHOLE); a++)
                params[a] = &ptrs[ki][a];
            for (int a = 0; a < k->n_out; a++) {
                memset(buf[ki][a].p, 0x7f, buf[ki][a].bytes);
                int64_t numel = sn_numel(k->args[a]);
                bool *part = malloc((size_t)numel + 1);
                if (sn_kernel_out_part(k, a, part)) { /* the rest of a shared buffer as it was */
                    tbuf ref;
                    tbuf_new(&ref, k->args[a]);
                    tbuf_put(&ref, sn_interp_value(it, k->args[a]));
                    size_t eb = ref.bytes / (size_t)numel;
                    for (int64_t i = 0; i < numel; i++)
                        if (!part[i]) memcpy((char *)buf[ki][a].p + eb * (size_t)i, (char *)ref.p + eb * (size_t)i, eb);
                    free(ref.p);
                }
                free(part);
            }
            sn_cuda_dims d = sn_cuda_launch_dims(k, tg);
            ck_assert(d.grid[0] > 0);
            sn_sim_opts o = sn_sim_defaults();
            o.order = (sn_sim_order)order;
            o.seed = 7;
            if (d.shared_bytes) o.shared_limit = (unsigned)tg->shared_max; /* opted into */
            if (sn_sim_launch(m, cs.fn[ki], d.grid, d.block, d.shared_bytes, params, &o, &e) !=
                SN_OK) {
                if (!res->failure[0]) snprintf(res->failure, sizeof res->failure, "%s", e.msg);
                res->worst = INFINITY;
                continue;
            }
            for (int a = 0; a < k->n_out; a++) {
                if (!sn_kernel_writes(k, a)) continue; /* the atomic dq's zero */
                const sn_node *x = k->args[a];
                double err = norm_err(&buf[ki][a], sn_interp_value(it, x));
                double ratio = err / tolerance(buf[ki][a].dt);
                if (!(ratio <= res->worst)) res->worst = isnan(ratio) ? INFINITY : ratio;
                res->checked++;
                if (order == 0 && !res->needle)
                    printf("%s: %s %s (%s): error %.2e (tolerance %.1e)\n", label,
                           sn_op_name(x->op), k->name, sn_dtype_name(x->dtype), err,
                           tolerance(buf[ki][a].dt));
            }
        }
    }
    for (int ki = 0; ki < n; ki++) {
        for (int a = 0; a < ks[ki]->n_out + ks[ki]->n_in; a++) free(buf[ki][a].p);
        if (scratch_bytes[ki]) free(scratch[ki]);
    }
    sn_sim_module_free(m);
    sn_cuda_source_free(&cs);
}

/* ---- graphs ---- */

int kv_heads(const att_case *c) { return c->hkv ? c->hkv : c->b1; }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    double u = (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
    return lo + (hi - lo) * u;
}

void set_random(sn_interp *it, const sn_node *n, double amp) {
    int64_t len = sn_numel(n);
    double *x = malloc(sizeof(double) * (size_t)len);
    ck_assert(x);
    for (int64_t i = 0; i < len; i++) x[i] = sn_dtype_round(n->dtype, uniform(-amp, amp));
    sn_err e;
    ck_assert_msg(sn_interp_set_f64(it, n, x, &e) == SN_OK, "%s", e.msg);
    free(x);
}

/* The kernels of g; with atomic_dq, for a CUDA target whose dk/dv kernel accumulates dq
 * (sn_target.att_dq_atomic: the dq kernel becomes a zero and a store around it); with
 * dkv_parts, for a CUDA target that splits grouped-query dk and dv in parts
 * (sn_target.att_dkv_parts); else for the CPU (one dk/dv kernel). */
bool atomic_dq, dkv_parts;

sn_program *fuse(sn_graph *g) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    sn_target tg = sn_target_cuda(80);
    tg.att_dq_atomic = atomic_dq;
    tg.att_dkv_parts = dkv_parts;
    sn_pipeline_opts o = {.target = atomic_dq || dkv_parts ? &tg : NULL};
    ck_assert_msg(sn_pipeline_kernels(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

sn_graph *case_graph(const att_case *c, int outs, sn_node *in[5]) {
    float scale = 1.0f / sqrtf((float)c->D);
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_input(g, "q", c->dt, SN_SHAPE(c->b0, c->b1, c->T, c->D));
    sn_node *k = sn_input(g, "k", c->dt, SN_SHAPE(c->b0, kv_heads(c), c->S, c->D));
    sn_node *v = sn_input(g, "v", c->dt, SN_SHAPE(c->b0, kv_heads(c), c->S, c->Dv));
    in[0] = q, in[1] = k, in[2] = v, in[3] = in[4] = NULL;
    if (outs == ATT_UNFUSED) { /* attention_lse alone, and attention reading a given lse */
        in[4] = sn_input(g, "lse", SN_F32, SN_SHAPE(c->b0, c->b1, c->T));
        sn_graph_add_output(g, sn_attention_lse(g, q, k, scale));
        sn_graph_add_output(g, sn_attention(g, q, k, v, in[4], scale));
    } else {
        sn_node *dout = in[3] = sn_input(g, "dout", c->dt, SN_SHAPE(c->b0, c->b1, c->T, c->Dv));
        sn_node *lse = sn_attention_lse(g, q, k, scale);
        sn_node *o = sn_attention(g, q, k, v, lse, scale);
        sn_node *x[] = {o, lse, outs & ATT_OUT_DQ ? sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale) : NULL,
                        outs & ATT_OUT_DK ? sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale) : NULL,
                        outs & ATT_OUT_DV ? sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale) : NULL};
        for (int i = 0; i < 5; i++)
            if (outs & 1 << i) sn_graph_add_output(g, x[i]);
    }
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

run_result check_case(const att_case *c, bool unfused, const char *needle, const char *plant) {
    return check_outputs(c, unfused ? ATT_UNFUSED : ATT_OUT_ALL, needle, plant);
}

run_result check_outputs(const att_case *c, int outs, const char *needle, const char *plant) {
    char label[160];
    snprintf(label, sizeof label, "%s sm_%d (%dx%d, kv heads %d) T=%lld S=%lld D=%lld Dv=%lld%s",
             sn_dtype_name(c->dt), c->sm, c->b0, c->b1, kv_heads(c), (long long)c->T,
             (long long)c->S, (long long)c->D, (long long)c->Dv,
             outs == ATT_UNFUSED ? " unfused forward" : outs == ATT_OUT_ALL ? "" : " some outputs");
    sn_node *in[5];
    sn_graph *g = case_graph(c, outs, in);
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    static const double amp[] = {2, 2, 1, 1, 0.5}; /* q, k, v, dout, a given lse */
    for (int i = 0; i < 5; i++)
        if (in[i]) set_random(it, in[i], amp[i]);
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    sn_program *p = fuse(g);
    sn_target tg = sn_target_cuda(c->sm);
    run_result r = {.needle = needle, .plant = plant};
    /* the attention kernels: o and lse; dq; dk and dv (the unfused forward: 2; other outputs:
     * the program's) */
    int want = 0;
    if (outs == ATT_UNFUSED) want = 2;
    else if (outs == ATT_OUT_ALL) want = 3;
    else
        for (int i = 0; i < p->n_kernels; i++) want += p->kernels[i]->kind == SN_KER_ATTENTION;
    if (atomic_dq && outs == ATT_OUT_ALL) { /* zero, dk/dv with dq, store: in that order */
        want = 4;
        for (int i = 0, at = 0; i < p->n_kernels; i++) {
            const sn_kernel *ker = p->kernels[i];
            if (ker->kind != SN_KER_ATTENTION || ker->anchor->op == SN_OP_ATTENTION) continue;
            static const int stages[] = {SN_ATT_DQ_ZERO, SN_SUM_PARTIAL, SN_ATT_DQ_STORE};
            ck_assert_int_lt(at, 3);
            ck_assert_int_eq(ker->stage, stages[at++]);
        }
        strncat(label, " atomic dq", sizeof label - strlen(label) - 1);
    }
    if (dkv_parts && outs == ATT_OUT_ALL) { /* the dk/dv kernel's parts, then their sum */
        int parts = 0, at = -1;
        for (int i = 0; i < p->n_kernels; i++) {
            const sn_kernel *ker = p->kernels[i];
            if (!ker->dkv_parts) continue;
            ck_assert_int_eq(ker->stage, parts ? SN_SUM_FINISH : SN_SUM_PARTIAL);
            ck_assert(parts == 0 || i == at + 1);
            at = i;
            parts++;
        }
        ck_assert_int_eq(parts, kv_heads(c) < c->b1 && c->dt != SN_F32 ? 2 : 0);
        want += parts / 2;
        strncat(label, parts ? " dk/dv in parts" : " (no parts)", sizeof label - strlen(label) - 1);
    }
    run_attention(p, it, &tg, want, label, &r);
    sn_program_free(p);
    sn_interp_free(it);
    sn_graph_free(g);
    return r;
}

/* ---- NVRTC ---- */

sn_program *case_program(const att_case *c, sn_graph **gp) {
    sn_node *in[5];
    *gp = case_graph(c, ATT_OUT_ALL, in);
    return fuse(*gp);
}

/* Compiles c's attention kernels for c->sm; SN_ATT_DUMP names a folder to write them to. */
int nvrtc_check(const att_case *c) { return nvrtc_check_planted(c, NULL, NULL); }

int nvrtc_check_planted(const att_case *c, const char *needle, const char *plant) {
    sn_graph *g;
    sn_program *p = case_program(c, &g);
    const sn_kernel *ks[8];
    int n = 0, bad = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ATTENTION) ks[n++] = p->kernels[i];
    sn_target tg = sn_target_cuda(c->sm);
    sn_cuda_source cs;
    sn_err e;
    ck_assert_msg(sn_cuda_render(ks, n, &tg, &cs, &e) == SN_OK, "%s", e.msg);
    if (needle) {
        char *planted = sn_test_replace_first(cs.src, needle, plant);
        free(cs.src);
        cs.src = planted;
    }
    const char *src = cs.src;
    const char *dump = getenv("SN_ATT_DUMP"); /* a folder: write each source there */
    if (dump) {
        char path[512];
        snprintf(path, sizeof path, "%s/att_%s_%lld_sm%d%s.cu", dump, sn_dtype_name(c->dt),
                 (long long)c->D, c->sm, c->hkv ? "_gqa" : "");
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(src, f);
            fclose(f);
        }
    }
    sn_cuda_module m;
    sn_status st = sn_nvrtc_compile(src, "attention.cu", c->sm, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("nvrtc: %s: skipped\n", e.msg);
        bad = -1;
    } else {
        ck_assert_msg(st == SN_OK, "%s\n%s", e.msg, src);
        for (int i = 0; i < n; i++) {
            const sn_cuda_kernel_info *inf = sn_cuda_module_info(&m, cs.fn[i]);
            ck_assert_msg(inf, "no ptxas report of %s", ks[i]->name);
            printf("nvrtc sm_%d %s D=%lld%s %-28s %-16s %3d registers, %5d bytes shared, "
                   "spills %d/%d, stack %d\n", c->sm, sn_dtype_name(c->dt), (long long)c->D,
                   c->hkv ? " gqa" : "", ks[i]->name, sn_op_name(ks[i]->anchor->op),
                   inf->registers, inf->shared_bytes, inf->spill_store_bytes,
                   inf->spill_load_bytes, inf->stack_bytes);
            if (inf->spill_store_bytes || inf->spill_load_bytes || inf->stack_bytes ||
                inf->shared_bytes > 48 << 10)
                bad++;
        }
        /* ptxas's warnings and its "Potential Performance Loss" notes (wgmma serialized,
         * waited for at every one: C7518 when a planted read of s in flight made ptxas wait)
         * count as bad */
        static const char *const notes[] = {"arning", "Performance Loss"};
        for (int k = 0; k < 2; k++) {
            for (const char *w = m.log ? strstr(m.log, notes[k]) : NULL; w;
                 w = strstr(w + 1, notes[k])) {
                const char *end = strchr(w, '\n');
                printf("nvrtc sm_%d: ptxas: ...%.*s\n", c->sm,
                       (int)(end ? end - w : (long)strlen(w)), w);
                bad++;
            }
        }
    }
    fflush(stdout);
    sn_cuda_module_free(&m);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
    return bad;
}
