/* gpu_check_kernels.c: every kernel kind on the device under check against the reference
 * interpreter: small graphs whose programs hold pointwise kernels (every pointwise op, bf16 and
 * f16 on the way), GEMMs (cuBLASLt) with their backward in f32, bf16 and f16, row ops (layernorm, rmsnorm, softmax,
 * cross-entropy) and column reductions, the embedding gather and its scatter-add, and flash
 * attention forward and backward in f32, bf16 and f16 at head sizes 64 and 128 with a T no tile
 * divides. Convention: fresh random inputs from the run's seed, every output and every
 * allocation poisoned (0xff) before the run, every output and gradient compared. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "passes/pipeline.h"
#include "support/rng.h"
#include "train/train.h"
#include "gpu_check.h"

typedef struct {
    int32_t i32_limit; /* integer inputs (ids, targets) are drawn from [0, limit) */
    double tol;        /* on the normalized error of every output */
} case_opts;

static int64_t node_bytes(const sn_node *n) { return sn_numel(n) * sn_dtype_bits(n->dtype) / 8; }

/* The values the check compares: the loss, the graph's outputs and every parameter gradient. */
static int compared_nodes(sn_graph *g, const sn_node **out, int cap) {
    int n = 0;
    if (g->loss && n < cap) out[n++] = g->loss;
    for (int i = 0; i < g->n_outputs && n < cap; i++)
        if (g->outputs[i] != g->loss) out[n++] = g->outputs[i];
    for (int i = 0; i < g->n_nodes && n < cap; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && g->nodes[i]->grad) out[n++] = g->nodes[i]->grad;
    return n;
}

/* Random leaves, the same into the executor and the interpreter. */
static sn_status set_leaves(sn_graph *g, sn_exec *x, sn_interp *it, const case_opts *c,
                            uint64_t seed, sn_err *e) {
    sn_rng r = sn_rng_seed(seed);
    sn_status st = SN_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        sn_node *n = g->nodes[i];
        if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
        int64_t m = sn_numel(n);
        void *buf = sn_malloc((size_t)m * 4 + 4, "a check's random input", e);
        if (!buf) return SN_ERR_OOM;
        if (n->dtype == SN_I32) {
            for (int64_t k = 0; k < m; k++) ((int32_t *)buf)[k] = (int32_t)sn_rng_below(&r, (uint64_t)c->i32_limit);
            st = sn_exec_set(x, n, buf, e);
            if (!st) st = sn_interp_set_i32(it, n, buf, e);
        } else {
            for (int64_t k = 0; k < m; k++) ((float *)buf)[k] = (float)(2 * sn_rng_uniform(&r) - 1);
            st = sn_exec_set(x, n, buf, e);
            if (!st) st = sn_interp_set(it, n, buf, e);
        }
        free(buf);
    }
    return st;
}

static const char *kind_counts(const sn_program *p, int *totals, char *buf, size_t len) {
    int count[SN_KER_KIND_COUNT] = {0};
    for (int k = 0; k < p->n_kernels; k++) count[p->kernels[k]->kind]++;
    size_t at = (size_t)snprintf(buf, len, "%d kernels (", p->n_kernels);
    const char *sep = "";
    for (int k = 0; k < SN_KER_KIND_COUNT && at < len; k++) {
        if (!count[k]) continue;
        totals[k] += count[k];
        at += (size_t)snprintf(buf + at, len - at, "%s%d %s", sep, count[k],
                               sn_kernel_kind_name((sn_kernel_kind)k));
        sep = ", ";
    }
    if (at < len) snprintf(buf + at, len - at, ")");
    return buf;
}

/* Compiles g, runs it on the poisoning device and on the interpreter, compares. Frees g. */
static void check_graph(gc_run *r, const char *name, sn_graph *g, const case_opts *c, uint64_t seed) {
    gc_step *s = gc_begin(r, name);
    sn_err e = {0};
    sn_program *p = NULL;
    sn_exec *x = NULL;
    sn_interp *it = NULL;
    sn_device *pd = NULL;
    float *got = NULL;
    sn_status st = sn_graph_error(g) ? SN_ERR_INVALID : SN_OK;
    if (st) snprintf(e.msg, sizeof e.msg, "%s", sn_graph_error(g));
    sn_target tg = r->dev->target;
    tg.dgelu_min_elems = 0; /* the DGELU epilogue at these small sizes too (target.h) */
    if (!st) st = sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &tg}, &p, NULL, &e);
    if (!st && !(it = sn_interp_new(g, false))) st = sn_fail(&e, SN_ERR_OOM, "out of memory for the interpreter");
    if (!st && !(pd = gc_poison_device_new(r->dev, &e))) st = SN_ERR_OOM;
    if (!st) st = sn_exec_new(pd, p, &x, &e);
    if (!st) st = set_leaves(g, x, it, c, seed, &e);
    const sn_node *outs[64];
    int n_out = compared_nodes(g, outs, 64);
    for (int i = 0; i < n_out && !st; i++) /* outputs live in the zeroed persistent block */
        st = sn_exec_memset(x, sn_exec_node_ref(outs[i], 0), 0xff, node_bytes(outs[i]), &e);
    if (!st) st = sn_exec_run(x, &e);
    if (!st) st = sn_interp_run(it, &e);
    double worst = 0, worst_ratio = 0;
    char worst_at[96] = "-";
    for (int i = 0; i < n_out && !st; i++) {
        const sn_node *n = outs[i];
        if (n->dtype != SN_F32) {
            st = sn_fail(&e, SN_ERR_INVALID, "check graph %s: output %%%d is %s (cast it to f32)",
                         name, n->id, sn_dtype_name(n->dtype));
            break;
        }
        free(got);
        if (!(got = sn_malloc((size_t)sn_numel(n) * 4 + 4, "an output on the host", &e))) {
            st = SN_ERR_OOM;
            break;
        }
        if ((st = sn_exec_get(x, n, got, &e))) break;
        double err = gc_rel_err(got, sn_interp_value(it, n), sn_numel(n), 1e-6);
        if (!(err / c->tol <= worst_ratio)) {
            worst_ratio = err / c->tol;
            worst = err;
            snprintf(worst_at, sizeof worst_at, "%%%d %s%s", n->id, sn_op_name(n->op),
                     n == g->loss ? " (loss)" : "");
        }
    }
    char kinds[160] = "";
    if (p) kind_counts(p, r->kinds_run, kinds, sizeof kinds);
    gc_num(s, "kernels", p ? p->n_kernels : 0);
    gc_num(s, "outputs", n_out);
    gc_num(s, "max_rel_err", worst);
    gc_num(s, "tolerance", c->tol);
    if (st == SN_ERR_UNSUPPORTED) /* not built yet (f16 storage on CUDA; bf16 on the CPU) */
        gc_end(r, s, GC_SKIP, "not supported yet on the %s device: %s", r->cuda ? "CUDA" : "CPU", e.msg);
    else if (st)
        gc_end(r, s, GC_FAIL, "%s", e.msg);
    else
        gc_end(r, s, worst_ratio <= 1 ? GC_PASS : GC_FAIL, "%s, %d values compared, worst error "
               "%.2e at %s (tolerance %.0e)", kinds, n_out, worst, worst_at, c->tol);
    free(got);
    sn_exec_free(x);
    gc_poison_device_free(pd);
    sn_interp_free(it);
    sn_program_free(p);
    sn_graph_free(g);
}

/* ---- the graphs ---- */

/* Every pointwise op over (5, 67) (a tail no float4 covers), broadcasts, bf16 and i32 casts. */
static sn_graph *pointwise_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(5, 67));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(5, 67));
    sn_node *row = sn_input(g, "row", SN_F32, SN_SHAPE(67));
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(67));
    sn_node *pos = sn_exp(g, x);
    sn_node *terms[3][6] = {
        {sn_log(g, pos), sn_sqrt(g, pos), sn_rsqrt(g, pos), sn_tanh(g, x), sn_gelu(g, x), sn_silu(g, x)},
        {sn_gelu_bwd(g, x, y), sn_silu_bwd(g, x, y), sn_neg(g, y), sn_scale(g, x, 0.3f),
         sn_div(g, y, pos), sn_sub(g, x, row)},
        {sn_mul(g, x, y), sn_eq(g, x, x), sn_cast(g, ids, SN_F32),
         sn_cast(g, sn_cast(g, sn_scale(g, y, 4.0f), SN_I32), SN_F32), sn_exp(g, y), sn_mul(g, row, row)},
    };
    for (int t = 0; t < 3; t++) {
        sn_node *sum = terms[t][0];
        for (int i = 1; i < 6; i++) sum = sn_add(g, sum, terms[t][i]);
        sn_graph_add_output(g, sum);
    }
    return g;
}

/* Pointwise kernels storing and reading bf16 and f16 (rounding on the way). */
static sn_graph *pointwise_16_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(5, 67));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(5, 67));
    sn_node *xb = sn_cast(g, x, SN_BF16), *yh = sn_cast(g, y, SN_F16);
    sn_graph_add_output(g, sn_cast(g, sn_add(g, sn_gelu(g, xb), sn_mul(g, xb, xb)), SN_F32));
    sn_graph_add_output(g, sn_cast(g, sn_mul(g, yh, sn_exp(g, yh)), SN_F32));
    return g;
}

/* cross_entropy(gelu(x @ w + b)) and its backward: GEMMs forward and backward (dx = dy w^T,
 * dw = x^T dy), the bias gradient as a column reduction. */
static sn_graph *gemm_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 50, 96));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(3, 50));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(96, 80), SN_INIT_NORMAL, 0.5f);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(80), SN_INIT_NORMAL, 0.5f);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(80, 80), SN_INIT_NORMAL, 0.5f);
    sn_node *h = sn_gelu(g, sn_add(g, sn_matmul(g, x, w), b));
    sn_node *logits = sn_matmul_t(g, h, w2, false, true);
    sn_err e;
    if (!sn_graph_error(g)) sn_backward(g, sn_cross_entropy(g, logits, y, -1), &e);
    return g;
}

/* The gemm graph with bf16 or f16 (dt) operands, as the autocast pass makes it: inputs and
 * weights cast on the device, f32 products (fp32 accumulation) with the bias epilogue, the
 * backward's products on dt operands too (16-bit cuBLASLt plans). */
static sn_graph *gemm_16_graph(sn_dtype dt) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 50, 96));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(3, 50));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(96, 80), SN_INIT_NORMAL, 0.5f);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(80), SN_INIT_NORMAL, 0.5f);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(80, 80), SN_INIT_NORMAL, 0.5f);
    sn_node *h = sn_gelu(g, sn_add(g, sn_matmul(g, sn_cast(g, x, dt), sn_cast(g, w, dt)), b));
    sn_node *logits = sn_matmul_t(g, sn_cast(g, h, dt), sn_cast(g, w2, dt), false, true);
    sn_err e;
    if (!sn_graph_error(g)) sn_backward(g, sn_cross_entropy(g, logits, y, -1), &e);
    return g;
}

/* Rows of 300 (blocks of several warps): layernorm, rmsnorm, softmax, cross-entropy ignoring
 * class 3, a max and a mean over either axis, and their backwards. */
static sn_graph *row_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(24, 300));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(24));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(300), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(300), SN_INIT_NORMAL, 1);
    sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(300), SN_INIT_NORMAL, 1);
    sn_node *h = sn_layernorm(g, sn_add(g, x, b), w, b, 1e-5f);
    sn_node *rr = sn_rmsnorm(g, sn_gelu(g, h), v, 1e-5f);
    sn_node *sm = sn_softmax(g, sn_scale(g, rr, 0.5f));
    sn_node *loss = sn_cross_entropy(g, sn_add(g, sn_scale(g, sm, 4.0f), h), y, 3);
    sn_graph_add_output(g, sn_max(g, h, 1, false));
    sn_graph_add_output(g, sn_mean(g, rr, 0, false));
    sn_graph_add_output(g, sn_sum(g, x, 0, false));
    sn_err e;
    if (!sn_graph_error(g)) sn_backward(g, loss, &e);
    return g;
}

/* An embedding of 64 ids per row over a table of 100 (ids repeat: the scatter-add meets
 * collisions), cross-entropy over its 64 columns, and the table's gradient. */
static sn_graph *gather_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(6, 40));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(6, 40));
    sn_node *table = sn_param(g, "table", SN_F32, SN_SHAPE(100, 64), SN_INIT_NORMAL, 1);
    sn_node *h = sn_embedding(g, table, ids);
    sn_err e;
    if (!sn_graph_error(g)) sn_backward(g, sn_cross_entropy(g, sn_scale(g, h, 3.0f), y, -1), &e);
    return g;
}

/* Flash attention, forward (o, lse) and backward (dq, dk, dv) on (2, 3, T, D) in dtype dt
 * (f32 inputs cast on the device; outputs cast back to f32). */
static sn_graph *attention_graph(sn_dtype dt, int T, int D) {
    sn_graph *g = sn_graph_new();
    float scale = 1.0f / sqrtf((float)D);
    sn_node *in[4];
    const char *names[4] = {"q", "k", "v", "dout"};
    for (int i = 0; i < 4; i++) {
        in[i] = sn_input(g, names[i], SN_F32, SN_SHAPE(2, 3, T, D));
        if (dt != SN_F32) in[i] = sn_cast(g, in[i], dt);
    }
    sn_node *q = in[0], *k = in[1], *v = in[2], *dout = in[3];
    q = sn_scale(g, q, 2.0f); /* sharper rows than uniform [-1, 1) inputs give */
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_node *o = sn_attention(g, q, k, v, lse, scale);
    sn_node *outs[] = {o, lse, sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale),
                       sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale),
                       sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale)};
    for (int i = 0; i < 5; i++)
        sn_graph_add_output(g, outs[i] && outs[i]->dtype != SN_F32 ? sn_cast(g, outs[i], SN_F32) : outs[i]);
    return g;
}

void gc_check_kernels(gc_run *r) {
    uint64_t seed = r->o.seed;
    check_graph(r, "kernels: pointwise", pointwise_graph(), &(case_opts){50, 1e-5}, seed + 1);
    check_graph(r, "kernels: pointwise bf16 and f16", pointwise_16_graph(), &(case_opts){1, 1e-5}, seed + 5);
    check_graph(r, "kernels: gemm", gemm_graph(), &(case_opts){80, 1e-4}, seed + 2);
    /* 16-bit operands: the interpreter rounds what the program rounds, but sums in double where
     * cuBLASLt sums in f32, which flips an occasional rounding of a product's result cast to 16
     * bits (h, the gradients) by a unit: a few units of the storage type */
    check_graph(r, "kernels: gemm bf16", gemm_16_graph(SN_BF16), &(case_opts){80, 4.0 / 256}, seed + 6);
    check_graph(r, "kernels: gemm f16", gemm_16_graph(SN_F16), &(case_opts){80, 4.0 / 2048}, seed + 7);
    check_graph(r, "kernels: rows and column reductions", row_graph(), &(case_opts){300, 1e-4}, seed + 3);
    check_graph(r, "kernels: gather and scatter-add", gather_graph(), &(case_opts){64, 1e-5}, seed + 4);
    static const struct {
        sn_dtype dt;
        double tol; /* a few roundings of the storage type */
    } att[] = {{SN_F32, 1e-4}, {SN_BF16, 4.0 / 256}, {SN_F16, 4.0 / 2048}};
    for (int a = 0; a < 3; a++)
        for (int D = 64; D <= 128; D += 64) {
            char name[96];
            snprintf(name, sizeof name, "kernels: attention %s D=%d T=%d", sn_dtype_name(att[a].dt), D, r->o.att_T);
            check_graph(r, name, attention_graph(att[a].dt, r->o.att_T, D),
                        &(case_opts){1, att[a].tol}, seed + 10 + (uint64_t)(a * 2 + D / 64));
        }
    /* every kind the programs make ran (the optimizer kinds: the tiny GPT-2 step) */
    gc_step *s = gc_begin(r, "kernels: every kind covered");
    static const sn_kernel_kind kinds[] = {SN_KER_POINTWISE, SN_KER_ROW, SN_KER_REDUCE,
                                           SN_KER_GEMM, SN_KER_ATTENTION, SN_KER_GATHER};
    char missing[160] = "";
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        gc_num(s, sn_kernel_kind_name(kinds[i]), r->kinds_run[kinds[i]]);
        if (!r->kinds_run[kinds[i]])
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s",
                     sn_kernel_kind_name(kinds[i]));
    }
    if (missing[0]) gc_end(r, s, GC_FAIL, "no kernel of kind%s ran", missing);
    else gc_end(r, s, GC_PASS, "pointwise %d, row %d, reduce %d, gemm %d, attention %d, gather %d",
                r->kinds_run[SN_KER_POINTWISE], r->kinds_run[SN_KER_ROW], r->kinds_run[SN_KER_REDUCE],
                r->kinds_run[SN_KER_GEMM], r->kinds_run[SN_KER_ATTENTION], r->kinds_run[SN_KER_GATHER]);
}
