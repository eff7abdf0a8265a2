/* test_kernel_check.c: kernel.h's contract, checked once in program/ (kernel_check.c,
 * kernel_row.c): every kernel of tiny GPT-2's programs (f32 and bf16, attention fused or not)
 * keeps it; a row kernel's plan says which instructions form the epilogue exactly as the graph
 * does (an instruction is in the epilogue when its node depends on the row op); and planted
 * bugs, one a case (a row kernel's, a pointwise kernel's, the optimizer's, an NF4 dequantize's,
 * a program's scratch, a GEMM's epilogue), are SN_ERR_INTERNAL naming the kernel, from
 * sn_kernel_check and from both code generators alike (the CUDA one for GEMMs). */
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "codegen/llvm/llvm.h"
#include "frontend/sinter.h"
#include "program/program.h"
#include "harness.h"
#include "tiny_gpt2.h"

static sn_program *compile(bool fuse_attention, sn_precision precision) {
    sn_graph *g = tiny_training_graph_at(fuse_attention, precision);
    sn_program *p;
    sn_err e;
    sn_target t = sn_target_cpu(); /* with the GEMM's GELU epilogues, as CUDA's */
    t.gelu_unfused = false;
    sn_pipeline_opts o = {.precision = precision, .target = &t};
    ck_assert_msg(sn_pipeline_kernels(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

static void free_program(sn_program *p) {
    sn_graph *g = (sn_graph *)p->g;
    sn_program_free(p);
    sn_graph_free(g);
}

/* Whether node x depends on node a through its inputs (x == a included). */
static bool depends(const sn_node *x, const sn_node *a) {
    if (x == a) return true;
    for (int i = 0; i < x->n_in; i++)
        if (x->in[i]->id >= a->id && depends(x->in[i], a)) return true;
    return false;
}

/* Each kernel passes; each row kernel's plan agrees with the graph. */
static void check_program(const sn_program *p, int *fused_rows) {
    sn_err e;
    ck_assert_msg(sn_program_check(p, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        if (k->kind != SN_KER_ROW) continue;
        sn_row_plan pl;
        ck_assert_msg(sn_kernel_row_plan(k, &pl, &e) == SN_OK, "%s", e.msg);
        const sn_node *x = k->anchor->in[0];
        ck_assert_int_eq(pl.C, x->shape[x->rank - 1]);
        ck_assert_int_eq(pl.R * pl.C, sn_numel(x));
        ck_assert_int_eq(pl.fused, k->n_instr > 0);
        if (k->stage == SN_SUM_FINISH) continue;
        ck_assert_int_eq(pl.sums, k->stage == SN_SUM_PARTIAL);
        if (!pl.fused) {
            ck_assert_int_eq(pl.y, 0);
            for (int t = 0; t < k->anchor->n_in; t++) ck_assert(k->args[pl.buf[t]] == k->anchor->in[t]);
            continue;
        }
        ++*fused_rows;
        /* the row op: the anchor, or the norm backward pair's dx */
        ck_assert_ptr_eq(pl.op, k->row.pair ? k->instr[k->row.instr].node : k->anchor);
        for (int t = 0; t < k->n_instr; t++)
            ck_assert_msg(pl.dep[t] == depends(k->instr[t].node, pl.op), "%s: instruction %d (%s)",
                          k->name, t, sn_op_name(k->instr[t].node->op));
        if (pl.y >= 0) ck_assert_int_eq(k->store[pl.y], k->row.instr);
        for (int t = 0; t < pl.op->n_in; t++) /* per-row operands: their args */
            if (!sn_row_operand_per_element(pl.op->op, t))
                ck_assert(pl.buf[t] >= k->n_out && k->args[pl.buf[t]] == pl.op->in[t]);
    }
}

START_TEST(test_programs_keep_the_contract) {
    int fused_rows = 0;
    for (int c = 0; c < 4; c++) {
        sn_program *p = compile(c & 1, c & 2 ? SN_PRECISION_BF16 : SN_PRECISION_FP32);
        check_program(p, &fused_rows);
        free_program(p);
    }
    ck_assert_int_gt(fused_rows, 8); /* prologues and epilogues were there to check */
}
END_TEST

/* ---- planted bugs ---- */

/* A copy of k whose arrays are its own (a planted bug must not reach the program's). */
typedef struct {
    sn_kernel k;
    sn_pw_instr instr[SN_KER_MAX_INSTR];
    sn_access access[SN_KER_MAX_ARGS + 4];
} kcopy;

static void copy_of(kcopy *c, const sn_kernel *k) {
    c->k = *k;
    ck_assert(k->n_instr <= SN_KER_MAX_INSTR && k->n_access <= SN_KER_MAX_ARGS + 4);
    if (k->n_instr) memcpy(c->instr, k->instr, sizeof *k->instr * (size_t)k->n_instr);
    if (k->n_access) memcpy(c->access, k->access, sizeof *k->access * (size_t)k->n_access);
    c->k.instr = k->n_instr ? c->instr : NULL;
    c->k.access = k->n_access ? c->access : NULL;
}

/* The broken kernel is refused as the maker's bug, naming it and `what`; by the check and by
 * both code generators. */
static void refused(const sn_kernel *k, const char *what) {
    sn_err e;
    ck_assert_int_eq(sn_kernel_check(k, &e), SN_ERR_INTERNAL);
    ck_assert_msg(strstr(e.msg, k->name) && strstr(e.msg, what) && strstr(e.msg, "a bug in"),
                  "want '%s': %s", what, e.msg);
    char first[sizeof e.msg];
    memcpy(first, e.msg, sizeof first);
    sn_target t = sn_target_cuda(80);
    sn_cuda_source cs;
    ck_assert_int_eq(sn_cuda_render(&k, 1, &t, &cs, &e), SN_ERR_INTERNAL);
    ck_assert_str_eq(e.msg, first);
    sn_jit *j;
    if (sn_jit_new(&j, &e) != SN_OK) return; /* a build without LLVM */
    sn_cpu_kernel_fn fn;
    sn_kernel *mk = (sn_kernel *)k; /* the JIT takes non-const kernels; it does not change them */
    ck_assert_int_eq(sn_jit_compile(j, &mk, 1, &fn, &e), SN_ERR_INTERNAL);
    ck_assert_str_eq(e.msg, first);
    sn_jit_free(j);
}

/* The first kernel of p that `want` accepts. */
static const sn_kernel *find(const sn_program *p, bool (*want)(const sn_kernel *)) {
    for (int i = 0; i < p->n_kernels; i++)
        if (want(p->kernels[i])) return p->kernels[i];
    ck_abort_msg("no such kernel");
    return NULL;
}

static bool classifier(const sn_kernel *k) {
    return k->kind == SN_KER_ROW && k->anchor2 && k->stage == SN_SUM_PARTIAL;
}
static bool fused_norm(const sn_kernel *k) {
    return k->kind == SN_KER_ROW && k->anchor->op == SN_OP_LAYERNORM && k->n_instr > 1;
}
static bool norm_sums(const sn_kernel *k) {
    return k->kind == SN_KER_ROW && k->row.n_colsum > 0 && k->stage == SN_SUM_PARTIAL;
}
static bool norm_pair(const sn_kernel *k) { return k->kind == SN_KER_ROW && k->row.pair; }
static bool pointwise(const sn_kernel *k) { return k->kind == SN_KER_POINTWISE && k->n_instr > 1; }
static bool gemm_bias(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_BIAS;
}
static bool gemm_gelu(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_GELU_AUX_BIAS;
}
static bool gemm_dgelu(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_DGELU;
}

/* A broken GEMM kernel is refused as the maker's bug by the check and by the CUDA generator
 * (which leaves GEMMs to cuBLASLt once they keep the contract). */
static void gemm_refused(const sn_kernel *k, const char *what) {
    sn_err e;
    ck_assert_int_eq(sn_kernel_check(k, &e), SN_ERR_INTERNAL);
    ck_assert_msg(strstr(e.msg, k->name) && strstr(e.msg, what) && strstr(e.msg, "a bug in"),
                  "want '%s': %s", what, e.msg);
    sn_target t = sn_target_cuda(80);
    sn_cuda_source cs;
    ck_assert_int_eq(sn_cuda_render(&k, 1, &t, &cs, &e), SN_ERR_INTERNAL);
    ck_assert_msg(strstr(e.msg, what), "%s", e.msg);
}

/* The GEMM epilogues (kernel.h): the bf16 and f32 programs' GELU_AUX_BIAS and DGELU kernels keep
 * the contract; wrong epilogues planted on them, and on a BIAS kernel, are refused. */
START_TEST(test_planted_gemm_epilogues_are_internal) {
    for (int f32 = 0; f32 < 2; f32++) {
        sn_program *p = compile(true, f32 ? SN_PRECISION_FP32 : SN_PRECISION_BF16);
        sn_err e;
        const sn_kernel *fwd = find(p, gemm_gelu), *bwd = find(p, gemm_dgelu), *qkv = find(p, gemm_bias);
        ck_assert_msg(sn_kernel_check(fwd, &e) == SN_OK && sn_kernel_check(bwd, &e) == SN_OK, "%s", e.msg);
        kcopy c;
        copy_of(&c, qkv); /* a bias epilogue said to be a GELU one */
        c.k.gemm.epilogue = SN_EPI_GELU_BIAS;
        gemm_refused(&c.k, "stores the GELU of the bias epilogue's sum");
        copy_of(&c, fwd); /* the aux dropped from the epilogue's name */
        c.k.gemm.epilogue = SN_EPI_GELU_BIAS;
        gemm_refused(&c.k, "a gelu_bias GEMM has args (y, A, B, bias)");
        copy_of(&c, fwd); /* the aux and the GELU swapped */
        c.k.args[0] = fwd->args[1];
        c.k.args[1] = fwd->args[0];
        gemm_refused(&c.k, "stores the GELU of the bias epilogue's sum");
        copy_of(&c, fwd); /* another layer's bias */
        c.k.args[4] = qkv->args[3];
        gemm_refused(&c.k, "stores the GELU of the bias epilogue's sum");
        copy_of(&c, bwd); /* the GELU's gradient said to be a GELU */
        c.k.gemm.epilogue = SN_EPI_GELU_BIAS;
        gemm_refused(&c.k, "stores the GELU of the bias epilogue's sum");
        copy_of(&c, bwd); /* DGELU reading another aux than the GELU's input */
        c.k.args[3] = fwd->args[0];
        gemm_refused(&c.k, "a dgelu GEMM stores gelu_bwd(aux, product)");
        copy_of(&c, bwd); /* an epilogue kernel.h does not have */
        c.k.gemm.epilogue = SN_EPI_COUNT;
        gemm_refused(&c.k, "one of kernel.h's epilogues");
        free_program(p);
    }
}
END_TEST

static bool accum_bias(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_BIAS && k->gemm.accum;
}
static bool accum_gelu(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_GELU_AUX_BIAS && k->gemm.accum;
}
static bool accum_dgelu(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_DGELU && k->gemm.accum;
}
static bool accum_alone(const sn_kernel *k) {
    return k->kind == SN_KER_GEMM && k->gemm.epilogue == SN_EPI_NONE && k->gemm.accum;
}

/* accum (kernel.h: c added to the sum, cuBLASLt's C) with each epilogue, in a bf16 LoRA
 * program (the adapters' products as the base GEMMs' C): the kernels keep the contract; accum
 * dropped, another c, c as y, a bias said to be c are refused. */
START_TEST(test_planted_accum_is_internal) {
    sn_graph *g = tiny_lora_graph(SN_PRECISION_BF16, NULL);
    sn_err e;
    sn_program *p;
    sn_target t = sn_target_cpu(); /* with the GEMM's GELU epilogues, as CUDA's */
    t.gelu_unfused = false;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    int fused = 0;
    check_program(p, &fused);
    const sn_kernel *qkv = find(p, accum_bias), *fc = find(p, accum_gelu), *dg = find(p, accum_dgelu),
                    *dx = find(p, accum_alone);
    ck_assert(qkv && fc && dg && dx);
    kcopy c;
    copy_of(&c, qkv); /* accum dropped: the sum's add of c unexplained */
    c.k.gemm.accum = false;
    gemm_refused(&c.k, "its epilogue's bias and c");
    copy_of(&c, qkv); /* and c with it: the sum's add of c unexplained */
    c.k.gemm.accum = false;
    c.k.n_in--;
    gemm_refused(&c.k, "a bias GEMM stores the product + bias");
    copy_of(&c, qkv); /* another kernel's c */
    c.k.args[4] = fc->args[5];
    gemm_refused(&c.k, "has the product's");
    copy_of(&c, fc); /* c and the bias swapped */
    c.k.args[4] = fc->args[5];
    c.k.args[5] = fc->args[4];
    gemm_refused(&c.k, "has the product's");
    copy_of(&c, dg); /* DGELU without its c */
    c.k.gemm.accum = false;
    c.k.n_in--;
    gemm_refused(&c.k, "a dgelu GEMM stores gelu_bwd(aux, product)");
    copy_of(&c, dx); /* c as y: in place is memplan's, not the kernel's */
    c.k.args[3] = dx->args[0];
    gemm_refused(&c.k, "in a buffer of its own");
    copy_of(&c, dx); /* the product alone said to be stored */
    c.k.gemm.accum = false;
    c.k.n_in--;
    gemm_refused(&c.k, "a none GEMM stores the product or its 16-bit cast");
    free_program(p);
}
END_TEST

START_TEST(test_planted_bugs_are_internal) {
    sn_program *p = compile(true, SN_PRECISION_BF16);
    sn_program *pw = compile(false, SN_PRECISION_BF16); /* fused pointwise kernels: the
                                                           concatenation of dq, dk, dv */
    kcopy c;
    /* the classifier's pair: the loss of other logits */
    copy_of(&c, find(p, classifier));
    c.k.anchor2 = find(p, fused_norm)->anchor;
    refused(&c.k, "a classifier is a cross_entropy_bwd");
    /* a row op that sums over every row in one kernel */
    copy_of(&c, find(p, norm_sums));
    c.k.stage = SN_SUM_WHOLE;
    sn_kernel_work(&c.k, &c.k.n_items, &c.k.serial);
    refused(&c.k, "runs as the PARTIAL and FINISH kernels");
    /* a column sum read from an output */
    copy_of(&c, find(p, norm_sums));
    c.k.row.colsum_src[1] = 0;
    refused(&c.k, "column sum 1 must read");
    /* the norm backward pair: the weight gradient of another layernorm's x; a column sum read
     * from a sum; a pair whose dx is no instruction */
    const sn_kernel *pair = find(p, norm_pair);
    copy_of(&c, pair);
    for (int i = 0; i < p->n_kernels; i++)
        if (norm_pair(p->kernels[i]) && p->kernels[i]->anchor->in[0] != pair->anchor->in[0])
            c.k.anchor = p->kernels[i]->anchor;
    ck_assert_ptr_ne(c.k.anchor, pair->anchor);
    refused(&c.k, "is not the dx of");
    copy_of(&c, pair);
    c.k.row.colsum_src[1] = 1 + c.k.row.n_colsum - 1;
    refused(&c.k, "column sum 1 must read");
    copy_of(&c, pair);
    c.k.row.instr = c.k.n_instr;
    refused(&c.k, "the PARTIAL kernel of a norm weight gradient");
    /* a prologue instruction referring to a later one */
    copy_of(&c, find(p, fused_norm));
    ck_assert_int_gt(c.k.row.instr, 0);
    c.instr[0].in[0] = (sn_ref){.kind = SN_REF_INSTR, .index = c.k.n_instr - 1};
    refused(&c.k, "refers to no earlier instruction");
    /* an epilogue stored where no instruction is */
    copy_of(&c, find(pw, pointwise));
    c.k.store[0] = c.k.n_instr;
    refused(&c.k, "output 0 stores no instruction");
    /* a work split other than sn_kernel_work's */
    copy_of(&c, find(p, fused_norm));
    c.k.n_items += 1;
    refused(&c.k, "n_items is");
    /* an access reading an output */
    copy_of(&c, find(pw, pointwise));
    c.access[0].arg = 0;
    refused(&c.k, "access 0 reads args[0], not an input");
    /* the optimizer's flat range */
    sn_kernel adam = sn_optim_kernel(SN_KER_ADAMW, 100, 101, SN_BF16, "planted_adamw");
    refused(&adam, "flat range is [0, 100) with 101 decayed");
    adam = sn_optim_kernel(SN_KER_ADAMW, 100, 50, SN_I32, "planted_adamw_low");
    refused(&adam, "16-bit copies (i32)");
    /* an NF4 dequantize reading its own output, not its packed bytes */
    sn_graph *q = sn_graph_new();
    sn_node *w = sn_param_nf4(q, "w", SN_F32, SN_SHAPE(8, 40));
    sn_kernel dq = {.kind = SN_KER_DEQUANT, .n_out = 1, .n_in = 1, .anchor = w, .args = {w, w->in[0]}};
    snprintf(dq.name, sizeof dq.name, "planted_dequant");
    sn_kernel_work(&dq, &dq.n_items, &dq.serial);
    sn_err e;
    ck_assert_msg(sn_kernel_check(&dq, &e) == SN_OK, "%s", e.msg);
    dq.args[1] = w;
    refused(&dq, "unpacks a dequant_nf4's packed input");
    sn_graph_free(q);
    /* the few-row product (kernel.h SN_KER_GEMV): x @ W^T of an NF4 and of a bf16 weight
       accepted; its source not an arg, a 16-bit weight's cast of an f32 matrix, the transpose
       dropped (x's K not W's rows), more than 8 rows, refused */
    for (int w16 = 0; w16 < 2; w16++)
        for (int bad = 0; bad < 5; bad++) {
            sn_graph *gq = sn_graph_new();
            int64_t M = bad == 4 ? 9 : 2;
            sn_node *x = sn_input(gq, "x", SN_F32, SN_SHAPE(M, 24));
            sn_node *wv = w16 ? sn_cast(gq, sn_param(gq, "w", SN_BF16, SN_SHAPE(40, 24),
                                                     SN_INIT_NORMAL, 0.02f), SN_F32)
                              : sn_param_nf4(gq, "w", SN_F32, SN_SHAPE(40, 24));
            sn_node *y = sn_matmul_t(gq, x, wv, false, true);
            ck_assert_msg(y, "%s", sn_graph_error(gq));
            if (bad == 3) y->a.tb = false; /* planted: W (40, 24) read as (K, N) */
            if (bad == 2 && w16) ((sn_node *)wv->in[0])->dtype = SN_F32; /* planted */
            sn_kernel gk = {.kind = SN_KER_GEMV, .n_out = 1, .n_in = 2, .anchor = y,
                            .args = {y, x, bad == 1 ? wv : wv->in[0]}};
            snprintf(gk.name, sizeof gk.name, "planted_gemv");
            sn_kernel_work(&gk, &gk.n_items, &gk.serial);
            if (!bad) {
                ck_assert_msg(sn_kernel_check(&gk, &e) == SN_OK, "%s", e.msg);
                ck_assert(sn_gemv_of(&gk).tb && sn_gemv_of(&gk).K == 24 && sn_gemv_of(&gk).N == 40 &&
                          sn_gemv_of(&gk).source == (w16 ? SN_GEMV_W16 : SN_GEMV_NF4));
            } else if (bad == 1) {
                refused(&gk, "the source of its weight");
            } else if (bad == 2 && w16) {
                refused(&gk, "widens a bf16 or f16 matrix to f32 (not f32 to f32)");
            } else if (bad == 3) {
                refused(&gk, "or a transposed (N, K) one");
            } else if (bad == 4) {
                refused(&gk, "at most 8 rows, not 9");
            }
            sn_graph_free(gq);
        }
    /* a program whose two-stage kernel lost its scratch */
    sn_kernel *k = (sn_kernel *)find(p, norm_sums);
    int keep = k->scratch;
    k->scratch = p->n_values;
    ck_assert_int_eq(sn_program_check(p, &e), SN_ERR_INTERNAL);
    ck_assert_msg(strstr(e.msg, k->name) && strstr(e.msg, "scratch"), "%s", e.msg);
    k->scratch = keep;
    ck_assert_msg(sn_program_check(p, &e) == SN_OK, "%s", e.msg);
    free_program(p);
    free_program(pw);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kernel_check");
    TCase *tc = tcase_create("contract");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_programs_keep_the_contract);
    tcase_add_test(tc, test_planted_bugs_are_internal);
    tcase_add_test(tc, test_planted_gemm_epilogues_are_internal);
    tcase_add_test(tc, test_planted_accum_is_internal);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
