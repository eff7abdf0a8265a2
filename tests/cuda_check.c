/* cuda_check.c: the CUDA suites' shared steps (cuda_check.h): fuse, render, NVRTC, and each
 * generated kernel run on the SIMT simulator against the interpreter. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "support/rng.h"
#include "train/train.h"

sn_program *fuse(sn_graph *g) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

/* The program's kernels of `kind` into ks (p->n_kernels entries); returns how many.
 * SN_KER_KIND_COUNT: every kind the CUDA C renderer generates (not GEMMs). */
int kernels_of(const sn_program *p, sn_kernel_kind kind, const sn_kernel **ks) {
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        sn_kernel_kind kk = p->kernels[i]->kind;
        if (kind == SN_KER_KIND_COUNT ? kk != SN_KER_GEMM : kk == kind)
            ks[n++] = p->kernels[i];
    }
    return n;
}

int pointwise(const sn_program *p, const sn_kernel **ks) {
    return kernels_of(p, SN_KER_POINTWISE, ks);
}

int render_sm = 80;

/* row_cache: the target's (sn_target row_cache: row kernels keep their rows in registers) */
sn_cuda_source render_cached(const sn_kernel *const *ks, int n, bool row_cache) {
    sn_cuda_source s;
    sn_err e;
    sn_target t = sm(render_sm);
    t.row_cache = row_cache;
    ck_assert_msg(sn_cuda_render(ks, n, &t, &s, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(s.n_kernels, n);
    return s;
}

sn_cuda_source render(const sn_kernel *const *ks, int n) { return render_cached(ks, n, true); }

/* GPT-2 `name`'s training graph at B x T; with the LM head in chunks of chunk_rows rows (0:
 * whole); loss_only: the loss its one output, as sinter train compiles it (training reads no
 * logits), else the model's outputs kept (the logits too). */
sn_graph *gpt2_training_with(const char *name, int B, int T, sn_precision precision,
                                    int64_t chunk_rows, bool loss_only) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(name, &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    if (loss_only) {
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, m.loss);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = precision;
    o.chunk_logits = chunk_rows;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert(!chunk_rows || st.logits_chunks > 1);
    return g;
}

sn_graph *gpt2_training_at(const char *name, int B, int T, sn_precision precision) {
    return gpt2_training_with(name, B, T, precision, 0, false);
}

sn_graph *gpt2_training(const char *name, int B, int T) {
    return gpt2_training_at(name, B, T, SN_PRECISION_FP32);
}

/* Whether this build has NVRTC; if not, checks that saying so is what compiling does. */
bool have_nvrtc(void) {
    sn_cuda_module m;
    sn_err e;
    const char *src = "extern \"C\" __global__ void k() {}\n";
    sn_status st = sn_nvrtc_compile(src, "probe.cu", 80, &m, &e);
    sn_cuda_module_free(&m);
    if (st == SN_ERR_UNSUPPORTED) {
        ck_assert_msg(strstr(e.msg, "built without the CUDA toolkit"), "%s", e.msg);
        printf("test_cuda: %s: skipping the NVRTC checks\n", e.msg);
        return false;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return true;
}

/* Every generated kernel of the GPT-2 training program (all but GEMMs), in one
 * source per arch, compiled cold; no spills, no stack frame; prints the time, the unique
 * functions and the widest kernel. */
void nvrtc_program(sn_graph *g, const char *model, int B, int T, const int *arch, int n_arch) {
    sn_program *p = fuse(g);
    sn_err ej; /* the FINISH kernels joined into the next pair's launch, as a CUDA target has them */
    ck_assert_msg(sn_join_finish(p, &ej) == SN_OK, "%s", ej.msg);
    int joined = 0;
    for (int i = 0; i < p->n_kernels; i++) joined += p->kernels[i]->tail != NULL;
    ck_assert_int_gt(joined, 0);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 4));
    const sn_kernel **tmp = malloc(sizeof *ks * (size_t)(p->n_kernels + 4));
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    ck_assert_int_gt(n, 10);
    static const sn_kernel_kind kinds[4] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    sn_kernel opt[4]; /* the trainer's optimizer step over every parameter */
    for (int i = 0; i < 4; i++) {
        int64_t params = sn_graph_param_count(g);
        char name[16];
        snprintf(name, sizeof name, "opt_%d", i); /* AdamW writes the weights' 16-bit copies */
        opt[i] = sn_optim_kernel(kinds[i], params, params / 2,
                                 p->n_shadows ? p->shadows[0]->args[0]->dtype : SN_F32, name);
        ks[n++] = &opt[i];
    }
    for (int a = 0; a < n_arch; a++) {
        sn_target t = sm(arch[a]);
        sn_cuda_source cs;
        sn_err e;
        double t0 = now();
        ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
        double t1 = now();
        clock_t c0 = clock();
        sn_cuda_module m;
        ck_assert_msg(sn_nvrtc_compile(cs.src, model, arch[a], &m, &e) == SN_OK, "%s", e.msg);
        double t2 = now(), cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
        ck_assert_int_gt((long)m.cubin_size, 0);
        ck_assert_int_eq(m.n_info, cs.n_functions);
        int max_regs = 0, max_shared = 0;
        const char *widest = "";
        for (int i = 0; i < n; i++) {
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[i]);
            ck_assert_msg(in, "no ptxas report for %s (%s):\n%s", cs.fn[i], ks[i]->name, m.log);
            ck_assert_msg(in->registers > 0 && in->registers <= 255, "%s: %d registers",
                          in->name, in->registers);
            ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 &&
                          in->stack_bytes == 0, "%s spills on sm_%d: %d bytes stored, %d "
                          "loaded, %d bytes of stack", in->name, arch[a], in->spill_store_bytes,
                          in->spill_load_bytes, in->stack_bytes);
            if (in->registers > max_regs) max_regs = in->registers, widest = in->name;
            if (in->shared_bytes > max_shared) max_shared = in->shared_bytes;
        }
        printf("test_cuda: %s training (B=%d, T=%d; %d kernels in all, %d with a joined FINISH) for "
               "sm_%d: %d generated kernels (%d row, %d reduce, %d gather, %d pointwise, %d attention, 4 optimizer) as %d "
               "functions; "
               "rendered in %.3f s, one NVRTC compilation in %.2f s (%.2f s of CPU): no spills, no "
               "stack, at most %d registers (%s), %d bytes of shared memory\n", model, B, T,
               p->n_kernels, joined, arch[a], n,
               kernels_of(p, SN_KER_ROW, tmp), kernels_of(p, SN_KER_REDUCE, tmp),
               kernels_of(p, SN_KER_GATHER, tmp), pointwise(p, tmp),
               kernels_of(p, SN_KER_ATTENTION, tmp), cs.n_functions, t1 - t0, t2 - t1, cpu, max_regs, widest, max_shared);
        sn_cuda_module_free(&m);
        sn_cuda_source_free(&cs);
    }
    free(ks);
    free(tmp);
    sn_program_free(p);
    sn_graph_free(g);
}

/* ---- the generated CUDA executed on the CPU ---- */

int host_sm_count = 0;

sn_sim_module *host_compile(const char *src) {
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load(src, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_cuda: %s: skipping the CPU execution of generated CUDA\n", e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return m;
}

void to_buffer(sn_dtype t, const double *v, int64_t n, void *buf) {
    for (int64_t i = 0; i < n; i++) {
        float f = (float)v[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        if (t == SN_F32) ((float *)buf)[i] = f;
        else if (t == SN_I32) ((int32_t *)buf)[i] = (int32_t)v[i];
        else if (t == SN_F16) ((_Float16 *)buf)[i] = (_Float16)f; /* rounds to nearest even */
        else ((uint16_t *)buf)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* bf16 */
    }
}

void from_buffer(sn_dtype t, const void *buf, int64_t n, double *v) {
    for (int64_t i = 0; i < n; i++) {
        if (t == SN_F32) {
            v[i] = ((const float *)buf)[i];
        } else if (t == SN_I32) {
            v[i] = ((const int32_t *)buf)[i];
        } else if (t == SN_F16) {
            v[i] = (double)((const _Float16 *)buf)[i];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            v[i] = f;
        }
    }
}

/* Runs kernel k (its function fn, compiled into h) on the CPU with the interpreter's values of
 * its inputs and compares its outputs with the interpreter's (tol relative to the tensor's
 * largest value): with the launch sn_cuda_launch_dims gives, and for pointwise kernels also with
 * a small grid that makes the grid-stride loop go round, each in two thread orders (forward,
 * reversed), outputs poisoned (NaN, or a large integer) before every launch. Returns the worst
 * error instead of failing when `caught` is set (a planted bug's test). */
double host_check(sn_sim_module *h, const sn_kernel *k, const char *fn, const sn_interp *it,
                         double tol, bool caught) {
    void *buf[SN_KER_MAX_ARGS], *params[SN_KER_MAX_ARGS + 1];
    int nargs = k->n_out + k->n_in;
    for (int i = 0; i < nargs; i++) {
        const sn_node *n = k->args[i];
        buf[i] = aligned_alloc(64, (dtype_bytes(n->dtype) * (size_t)sn_numel(n) + 64) / 64 * 64);
        ck_assert(buf[i]);
        params[i] = &buf[i];
        if (i >= k->n_out) {
            const double *v = sn_interp_value(it, n);
            ck_assert_msg(v, "%s: the interpreter kept no value of %%%d", k->name, n->id);
            to_buffer(n->dtype, v, sn_numel(n), buf[i]);
        }
    }
    float *scratch = k->stage != SN_SUM_WHOLE ? sn_test_scratch(k) : NULL; /* partial sums */
    void *first_order = NULL;
    params[nargs] = &scratch;
    sn_target t = sm(80);
    t.sm_count = host_sm_count;
    sn_cuda_dims dims[2] = {sn_cuda_launch_dims(k, &t), {.grid = {3, 1, 1}, .block = {256, 1, 1}}};
    double *got = NULL, worst = 0;
    for (int d = 0; d < (k->kind == SN_KER_POINTWISE ? 2 : 1); d++)
        for (int reversed = 0; reversed < 2; reversed++) {
            for (int o = 0; o < k->n_out; o++) {
                const sn_node *n = k->args[o];
                size_t eb = dtype_bytes(n->dtype);
                memset(buf[o], n->dtype == SN_I32 ? 0x7f : 0xff, eb * (size_t)sn_numel(n));
                bool *part = malloc((size_t)sn_numel(n) + 1);
                char *ref = malloc(eb * (size_t)sn_numel(n) + 1);
                if (sn_kernel_out_part(k, o, part)) { /* the rest of the buffer as it was */
                    to_buffer(n->dtype, sn_interp_value(it, n), sn_numel(n), ref);
                    for (int64_t i = 0; i < sn_numel(n); i++)
                        if (!part[i]) memcpy((char *)buf[o] + eb * (size_t)i, ref + eb * (size_t)i, eb);
                }
                free(part);
                free(ref);
            }
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_err e;
            sn_status st = sn_sim_launch(h, fn, dims[d].grid, dims[d].block, dims[d].shared_bytes,
                                         params, &so, &e);
            if (caught && st) {
                printf("test_cuda: %s: %s\n", k->name, e.msg);
                worst = INFINITY;
                continue;
            }
            ck_assert_msg(st == SN_OK, "%s", e.msg);
            if (scratch) { /* partial sums: the same bits in either thread order */
                size_t bytes = (size_t)sn_kernel_scratch_bytes(k);
                if (!reversed) first_order = realloc(first_order, bytes), memcpy(first_order, scratch, bytes);
                else if (caught && memcmp(first_order, scratch, bytes)) {
                    printf("test_cuda: %s: its scratch differs between thread orders\n", k->name);
                    worst = INFINITY;
                } else ck_assert_msg(!memcmp(first_order, scratch, bytes), "%s: the partial sums differ "
                                     "between thread orders", k->name);
            }
            for (int o = 0; o < k->n_out; o++) {
                const sn_node *n = k->args[o];
                int64_t numel = sn_numel(n);
                if (!sn_kernel_writes(k, o)) continue; /* a PARTIAL kernel's sums: its FINISH's */
                got = realloc(got, sizeof(double) * (size_t)numel);
                from_buffer(n->dtype, buf[o], numel, got);
                char what[200];
                snprintf(what, sizeof what, "%s as %s (grid %u x block %u x %u, %s order) %%%d",
                         k->name, fn, dims[d].grid[0], dims[d].block[0], dims[d].block[1],
                         reversed ? "reversed" : "forward", n->id);
                /* a 16-bit value may round one unit (2^-8, 2^-11 of the largest) away from the
                 * interpreter's where the f32 sums differ in their last bits: two units */
                double tl = n->dtype == SN_BF16 ? 8e-3 : n->dtype == SN_F16 ? 1e-3 : tol;
                if (caught) {
                    const double *want = sn_interp_value(it, n);
                    double scale = 1e-6;
                    for (int64_t i = 0; i < numel; i++) scale = fmax(scale, fabs(want[i]));
                    for (int64_t i = 0; i < numel; i++) {
                        double err = fabs(got[i] - want[i]) / scale;
                        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
                    }
                } else { /* equal infinities (a causal mask's fill) agree */
                    double *want = malloc(sizeof(double) * (size_t)numel);
                    memcpy(want, sn_interp_value(it, n), sizeof(double) * (size_t)numel);
                    for (int64_t i = 0; i < numel; i++)
                        if (isinf(want[i]) && got[i] == want[i]) got[i] = want[i] = 0;
                    sn_check_close(what, got, want, (size_t)numel, tl, 1e-6);
                    free(want);
                }
            }
        }
    free(got);
    free(first_order);
    for (int i = 0; i < nargs; i++) free(buf[i]);
    return worst;
}

const int32_t *fixed_i32 = NULL;

sn_interp *interp_run(const sn_graph *g, int vocab, bool init_rule) {
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    sn_rng r = sn_rng_seed(1234);
    sn_err e;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
        int64_t numel = sn_numel(n);
        if (n->dtype == SN_I32) {
            int32_t *v = malloc(sizeof(int32_t) * (size_t)numel);
            for (int64_t j = 0; j < numel; j++)
                v[j] = fixed_i32 ? fixed_i32[j] : (int32_t)sn_rng_below(&r, (uint64_t)vocab);
            ck_assert_msg(sn_interp_set_i32(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        } else {
            float *v = malloc(sizeof(float) * (size_t)numel);
            if (init_rule && n->op == SN_OP_PARAM) sn_param_init(n, v, 7);
            else for (int64_t j = 0; j < numel; j++) v[j] = (float)sn_rng_normal(&r);
            ck_assert_msg(sn_interp_set(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    return it;
}

/* Fuses g, renders its generated kernels (every kind but GEMMs) into one source,
 * runs each on the CPU against the interpreter; returns the number of kernels run (0: no g++).
 * counts (may be NULL) gets the kernels run per kind. */
int run_on_host(sn_graph *g, int vocab, bool init_rule, double tol, int *counts) {
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    ck_assert_int_gt(n, 0);
    sn_cuda_source cs = render(ks, n);
    sn_sim_module *h = host_compile(cs.src);
    int ran = 0;
    if (h) {
        sn_interp *it = interp_run(g, vocab, init_rule);
        for (int i = 0; i < n; i++) {
            host_check(h, ks[i], cs.fn[i], it, tol, false);
            if (counts) counts[ks[i]->kind]++;
        }
        ran = n;
        sn_interp_free(it);
        sn_sim_module_free(h);
    }
    sn_cuda_source_free(&cs);
    free(ks);
    sn_program_free(p);
    return ran;
}
