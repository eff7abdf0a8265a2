/* gpu_check_attention.c: sinter's causal attention alone, timed on the device under check: per
 * shape (B, H, T, D) with KV heads for k and v (H: none shared; fewer: grouped-query, as LLaMA's),
 * bf16 q, k, v (and dout) as inputs, two programs compiled through the same
 * pipeline as the check's other graphs: the forward (attention_lse + attention: one kernel that
 * writes o and lse) and the forward with the backward (dq: attention_bwd_q; dk and dv:
 * attention_bwd_k + _v, one kernel), i.e. one layer's attention in the training step (3
 * kernels). Convention: warm-up runs (the second is captured as a CUDA Graph), then the median
 * of the timed runs, each between two device events; ms a layer, and TFLOP/s on the causal half
 * of the products (forward 2 matmuls, forward + backward 7, as FlashAttention counts). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/pipeline.h"
#include "support/half.h"
#include "support/rng.h"
#include "gpu_check.h"

enum { MAX_REPS = 200 };

static uint16_t bf16_bits(float f) { /* round to nearest even (the inputs are finite) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* What a timed program computes: the forward, the forward and dq, or the forward and the whole
 * backward (the difference of the last two is the dk/dv kernel's time). */
typedef enum { ATT_FWD, ATT_FWD_DQ, ATT_FWD_BWD } att_what;

/* q, dout (B, H, T, D) and k, v (B, KV, T, D) bf16 -> o (B, H, T, D) bf16, lse (B, H, T) f32
 * and, as `what` says, dq, dk, dv (shaped as q, k, v) bf16, all outputs; in[] the four inputs. */
static sn_graph *attention_graph(int B, int H, int T, int D, int KV, att_what what, sn_node **in) {
    sn_graph *g = sn_graph_new();
    if (!g) return NULL;
    const char *names[4] = {"q", "k", "v", "dout"};
    for (int i = 0; i < 4; i++)
        in[i] = sn_input(g, names[i], SN_BF16, SN_SHAPE(B, i == 1 || i == 2 ? KV : H, T, D));
    sn_node *q = in[0], *k = in[1], *v = in[2], *dout = in[3];
    float f = 1.0f / sqrtf((float)D);
    sn_node *lse = sn_attention_lse(g, q, k, f);
    sn_node *o = sn_attention(g, q, k, v, lse, f);
    sn_graph_add_output(g, o);
    sn_graph_add_output(g, lse);
    if (what != ATT_FWD) sn_graph_add_output(g, sn_attention_bwd_q(g, q, k, v, o, dout, lse, f));
    if (what == ATT_FWD_BWD) { /* bwd_k before bwd_v: the fuse pass gives both to one kernel */
        sn_graph_add_output(g, sn_attention_bwd_k(g, q, k, v, o, dout, lse, f));
        sn_graph_add_output(g, sn_attention_bwd_v(g, q, k, v, o, dout, lse, f));
    }
    return g;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double med, min, max; /* seconds a run */
    int kernels;
} att_time;

/* The outputs of a forward + backward (o, lse, dq, dk, dv, in the graph's order) as floats,
 * kept from the plan's own kernels so that each --att-tiles configuration's are compared with
 * them: a tuning run on a GPU is also a check of the variants it times (the same inputs). */
typedef struct {
    float *v;
    int64_t n[5];
} att_outputs;

static sn_status download_outputs(sn_exec *x, const sn_graph *g, att_outputs *out, sn_err *e) {
    int64_t total = 0;
    for (int i = 0; i < g->n_outputs && i < 5; i++) total += out->n[i] = sn_numel(g->outputs[i]);
    if (!(out->v = sn_malloc((size_t)total * sizeof(float), "the attention's outputs", e)))
        return SN_ERR_OOM;
    float *at = out->v;
    for (int i = 0; i < g->n_outputs && i < 5; i++) {
        const sn_node *n = g->outputs[i];
        sn_status st = sn_exec_download(x, at, sn_exec_node_ref(n, 0), out->n[i] * sn_dtype_bits(n->dtype) / 8, e);
        if (st) return st;
        if (n->dtype == SN_BF16) /* widened in place, from the end */
            for (int64_t j = out->n[i] - 1; j >= 0; j--) at[j] = sn_bf16_to_f32(((const uint16_t *)at)[j]);
        at += out->n[i];
    }
    return SN_OK;
}

/* The largest |a - b| over max |a| of any of the outputs; *which its index. */
static double outputs_differ(const att_outputs *a, const att_outputs *b, int *which) {
    double worst = 0;
    int64_t at = 0;
    *which = 0;
    for (int i = 0; i < 5 && a->n[i]; at += a->n[i], i++) {
        double big = 0, d = 0;
        for (int64_t j = 0; j < a->n[i]; j++) {
            big = fmax(big, fabs(a->v[at + j]));
            double x = fabs((double)a->v[at + j] - b->v[at + j]);
            d = x > d || x != x ? x : d; /* NaN counts */
        }
        double rel = big > 0 ? d / big : d;
        if (rel > worst || rel != rel) worst = rel, *which = i;
    }
    return worst;
}

/* Compiles and times one program; SN_OK with *t filled, and with outs the outputs of its last
 * run. */
static sn_status time_program(gc_run *r, const int *sh, att_what what, uint64_t seed,
                              att_time *t, att_outputs *outs, sn_err *e) {
    sn_device *d = r->dev;
    sn_node *in[4];
    bool bwd = what != ATT_FWD;
    sn_graph *g = attention_graph(sh[0], sh[1], sh[2], sh[3], sh[4], what, in);
    if (!g) return sn_fail(e, SN_ERR_OOM, "out of memory for a graph");
    sn_program *p = NULL;
    sn_exec *x = NULL;
    void *ev[2] = {NULL, NULL};
    int64_t n = (int64_t)sh[0] * sh[1] * sh[2] * sh[3]; /* q's elements; k's and v's are fewer */
    uint16_t *buf = NULL;
    int reps = r->o.att_reps < MAX_REPS ? r->o.att_reps : MAX_REPS;
    double s[MAX_REPS];
    sn_pipeline_opts po = {.target = &d->target};
    sn_status st = sn_graph_error(g) ? sn_fail(e, SN_ERR_INVALID, "%s", sn_graph_error(g)) : SN_OK;
    if (!st) st = sn_compile(g, &po, &p, NULL, e);
    if (!st) st = sn_exec_new(d, p, &x, e);
    if (!st && !(buf = sn_malloc((size_t)n * 2, "an attention input", e))) st = SN_ERR_OOM;
    sn_rng rng = sn_rng_seed(seed);
    for (int i = 0; i < (bwd ? 4 : 3) && !st; i++) { /* uniform [-1, 1); dout: the backward's */
        int64_t m = sn_numel(in[i]);
        for (int64_t j = 0; j < m; j++) buf[j] = bf16_bits((float)(2 * sn_rng_uniform(&rng) - 1));
        st = sn_exec_upload(x, sn_exec_node_ref(in[i], 0), buf, m * 2, e);
    }
    for (int i = 0; i < 2 && !st; i++)
        if (!(ev[i] = d->event_new(d, e))) st = e->code ? e->code : SN_ERR_DEVICE;
    if (x) sn_exec_time_kernels(x, false); /* events around the run only: it replays as a graph */
    for (int i = 0; i < r->o.warmup + reps && !st; i++) {
        st = d->event_record(d, ev[0], e);
        if (!st) st = sn_exec_run(x, e);
        if (!st) st = d->event_record(d, ev[1], e);
        if (!st) st = d->sync(d, e);
        if (!st && i >= r->o.warmup) st = d->event_elapsed(d, ev[0], ev[1], &s[i - r->o.warmup], e);
    }
    if (!st) {
        qsort(s, (size_t)reps, sizeof s[0], cmp_double);
        *t = (att_time){s[reps / 2], s[0], s[reps - 1], p->n_kernels};
    }
    if (!st && outs) st = download_outputs(x, g, outs, e);
    for (int i = 0; i < 2; i++)
        if (ev[i]) d->event_free(d, ev[i]);
    free(buf);
    sn_exec_free(x);
    sn_program_free(p);
    sn_graph_free(g);
    return st;
}

void gc_att_name(char *buf, size_t len, const char *what, const int *sh, const char *tail) {
    int n = snprintf(buf, len, "%s B=%d H=%d T=%d D=%d", what, sh[0], sh[1], sh[2], sh[3]);
    if (sh[4] != sh[1] && n >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " KV=%d", sh[4]);
    if (n >= 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, "%s", tail);
}

/* One shape at the tiles SN_ATT_TILES names (tiles: NULL, the plan's own; else config `ti` of
 * --att-tiles, its timings split into forward, dq and dk/dv). */
static void time_shape(gc_run *r, int a, const char *tiles, int ti, att_outputs *ref) {
    const int *sh = r->o.att_shapes[a];
    int B = sh[0], H = sh[1], T = sh[2], D = sh[3];
    char name[96], tail[24];
    snprintf(tail, sizeof tail, tiles ? " tiles #%d" : " bf16", ti);
    gc_att_name(name, sizeof name, "time: attention", sh, tail);
    gc_step *s = gc_begin(r, name);
    if (tiles) setenv("SN_ATT_TILES", tiles, 1);
    /* "dq=atomic": dq comes from the dk/dv kernel (program/kernel.h), so a program of the
     * forward and dq alone would time the dq kernel the variant does without: the backward
     * (zero, dk/dv with dq, store) is timed whole */
    bool atomic = tiles && sn_target_att_dq_atomic_asked();
    sn_err e = {0};
    att_time f = {0}, fq = {0}, fb = {0};
    att_outputs got = {0};
    sn_status st = time_program(r, sh, ATT_FWD, r->o.seed + 100 + (uint64_t)a, &f, NULL, &e);
    if (!st && tiles && !atomic)
        st = time_program(r, sh, ATT_FWD_DQ, r->o.seed + 300 + (uint64_t)a, &fq, NULL, &e);
    if (!st) st = time_program(r, sh, ATT_FWD_BWD, r->o.seed + 200 + (uint64_t)a, &fb,
                               ref ? &got : NULL, &e);
    if (tiles) unsetenv("SN_ATT_TILES");
    if (st) {
        free(got.v);
        gc_end(r, s, st == SN_ERR_UNSUPPORTED ? GC_SKIP : GC_FAIL, "%s%s",
               st == SN_ERR_UNSUPPORTED ? "not supported yet: " : "", e.msg);
        return;
    }
    /* a configuration's outputs against the plan's own (the same inputs): a wrong layout or
     * fragment is an error of the outputs' own size; two right kernels differ by roundings */
    char agree[200] = "";
    gc_status verdict = GC_PASS; /* a FAIL keeps its timings in the line */
    if (ref && !tiles) *ref = got;
    else if (ref && ref->v) {
        static const char *const names[] = {"o", "lse", "dq", "dk", "dv"};
        int which;
        double d = outputs_differ(ref, &got, &which);
        free(got.v);
        gc_num(s, "outputs_vs_default", d);
        verdict = d <= 5e-2 ? GC_PASS : GC_FAIL;
        snprintf(agree, sizeof agree, "; outputs against the default's (the same inputs): largest "
                 "difference %.3g of the largest value (%s)%s", d, names[which],
                 verdict ? ", over 5e-2: more than roundings" : "");
    }
    double mm = 2.0 * B * H * (double)T * T * D / 2; /* one causal product's FLOPs (per query head) */
    gc_num(s, "B", B);
    gc_num(s, "H", H);
    gc_num(s, "T", T);
    gc_num(s, "D", D);
    gc_num(s, "KV", sh[4]);
    gc_num(s, "fwd_ms", f.med * 1e3);
    gc_num(s, "fwd_ms_min", f.min * 1e3);
    gc_num(s, "fwd_ms_max", f.max * 1e3);
    gc_num(s, "fwd_tflops", 2 * mm / f.med / 1e12);
    gc_num(s, "fwd_bwd_ms", fb.med * 1e3);
    gc_num(s, "fwd_bwd_ms_min", fb.min * 1e3);
    gc_num(s, "fwd_bwd_ms_max", fb.max * 1e3);
    gc_num(s, "fwd_bwd_tflops", 7 * mm / fb.med / 1e12);
    gc_num(s, "bwd_ms", (fb.med - f.med) * 1e3);
    gc_num(s, "fwd_kernels", f.kernels);
    gc_num(s, "fwd_bwd_kernels", fb.kernels);
    int reps = r->o.att_reps < MAX_REPS ? r->o.att_reps : MAX_REPS;
    if (atomic) {
        gc_num(s, "atomic_dq", 1);
        gc_end(r, s, verdict, "%s: forward %.4f ms, backward with the atomic dq (zero, dk/dv "
               "with dq, store; %d kernels in all) about %.4f ms, forward + backward %.4f ms "
               "(medians of %d)%s", tiles, f.med * 1e3, fb.kernels, (fb.med - f.med) * 1e3,
               fb.med * 1e3, reps, agree);
        return;
    }
    if (tiles) {
        gc_num(s, "dq_ms", (fq.med - f.med) * 1e3);
        gc_num(s, "dkv_ms", (fb.med - fq.med) * 1e3);
        gc_end(r, s, verdict, "%s: forward %.4f ms, dq about %.4f ms, dk/dv about %.4f ms, "
               "forward + backward %.4f ms (medians of %d)%s", tiles, f.med * 1e3,
               (fq.med - f.med) * 1e3, (fb.med - fq.med) * 1e3, fb.med * 1e3, reps, agree);
        return;
    }
    gc_end(r, s, GC_PASS, "a layer's causal attention: forward (o, lse; %d kernel%s) %.4f ms "
           "(median of %d; %.4f to %.4f) = %.3g TFLOP/s; forward + backward (dq, dk, dv; %d "
           "kernels) %.4f ms (%.4f to %.4f) = %.3g TFLOP/s; the backward alone about %.4f ms",
           f.kernels, f.kernels == 1 ? "" : "s", f.med * 1e3, reps, f.min * 1e3, f.max * 1e3,
           2 * mm / f.med / 1e12, fb.kernels, fb.med * 1e3, fb.min * 1e3, fb.max * 1e3,
           7 * mm / fb.med / 1e12, (fb.med - f.med) * 1e3);
}

void gc_time_attention(gc_run *r) {
    att_outputs ref = {0}; /* the first shape's, with the plan's own kernels */
    bool tuning = r->o.att_tiles && *r->o.att_tiles;
    for (int a = 0; a < r->o.n_att_shapes; a++) time_shape(r, a, NULL, 0, tuning && a == 0 ? &ref : NULL);
    /* --att-tiles: the tile configurations to compare (a tuning run), at the first shape */
    char list[512];
    snprintf(list, sizeof list, "%s", r->o.att_tiles ? r->o.att_tiles : "");
    int ti = 0;
    for (char *save = NULL, *c = strtok_r(list, ";", &save); c && r->o.n_att_shapes;
         c = strtok_r(NULL, ";", &save))
        time_shape(r, 0, c, ++ti, &ref);
    free(ref.v);
}
