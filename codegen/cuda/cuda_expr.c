/* cuda_expr.c: the pieces every CUDA emitter writes: C types, exact float literals, parameter and
 * variable names, pointwise instructions evaluated in f32, kernel signatures.
 * Convention: names derive from positions (arg i, instruction i, access a) and op names, never
 * from node ids, so identical computations render to identical text (cuda_int.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "ir/dropout.h"
#include "program/pointwise.h"

const char *sn_cu_ctype(sn_dtype t) {
    switch (t) {
    case SN_F32: return "float";
    case SN_BF16: return "sn_bf16";
    case SN_F16: return "sn_f16";
    case SN_I32: return "int";
    case SN_U8: return "unsigned char"; /* packed NF4 storage (cuda_dequant.c) */
    case SN_F8E4M3: return "sn_f8e4m3";  /* a byte; the prelude's conversions */
    case SN_F8E5M2: return "sn_f8e5m2";
    default: SN_ASSERT(0);
    }
}

const char *sn_cu_float_lit(float v, char *buf, size_t len) {
    if (isnan(v)) return snprintf(buf, len, "(SN_INF - SN_INF)"), buf;
    if (isinf(v)) return snprintf(buf, len, v < 0 ? "(-SN_INF)" : "SN_INF"), buf;
    snprintf(buf, len, "%.9g", (double)v);
    if (!strpbrk(buf, ".e")) strncat(buf, ".0", len - strlen(buf) - 1);
    strncat(buf, "f", len - strlen(buf) - 1);
    return buf;
}

const char *sn_cu_arg_name(const sn_kernel *k, int i, char *buf, size_t len) {
    snprintf(buf, len, i < k->n_out ? "out%d" : "in%d", i < k->n_out ? i : i - k->n_out);
    return buf;
}

const char *sn_cu_var_name(const sn_kernel *k, int i, const char *sfx, char *buf, size_t len) {
    snprintf(buf, len, "%s_%d%s", sn_op_name(k->instr[i].node->op), i, sfx);
    return buf;
}

const char *sn_cu_operand(const sn_kernel *k, const sn_ref *r, const char *sfx, char *buf,
                          size_t len) {
    switch (r->kind) {
    case SN_REF_INSTR: return sn_cu_var_name(k, r->index, sfx, buf, len);
    case SN_REF_ACCESS: return snprintf(buf, len, "x%d%s", r->index, sfx), buf;
    case SN_REF_CONST: return sn_cu_float_lit(r->value, buf, len);
    }
    SN_ASSERT(0);
}

void sn_cu_describe(const sn_kernel *k, const sn_ref *r, char *buf, size_t len) {
    size_t at = strlen(buf);
    if (at + 8 >= len) return;
    if (r->kind == SN_REF_ACCESS) {
        snprintf(buf + at, len - at, "%%%d", k->args[k->access[r->index].arg]->id);
    } else if (r->kind == SN_REF_CONST) {
        char lit[32];
        snprintf(buf + at, len - at, "%s", sn_cu_float_lit(r->value, lit, sizeof lit));
    } else {
        const sn_pw_instr *in = &k->instr[r->index];
        snprintf(buf + at, len - at, "%s(", sn_op_name(in->node->op));
        for (int j = 0; j < in->n_in; j++) {
            if (j) strncat(buf, ", ", len - strlen(buf) - 1);
            sn_cu_describe(k, &in->in[j], buf, len);
        }
        strncat(buf, ")", len - strlen(buf) - 1);
    }
    if (strlen(buf) + 8 >= len) strcpy(buf + len - 8, "...");
}

_Static_assert(SN_OP_POINTWISE_COUNT == 19, "a new pointwise op needs its formula in sn_cu_emit_instr "
               "(and llvm_fused.c's sn_ll_pw_op, and the prelude's function if it calls one)");

void sn_cu_emit_instr(sn_cu_text *t, const sn_kernel *k, int i, const char *sfx) {
    sn_cu_emit_instr_at(t, k, i, sfx, NULL);
}

bool sn_cu_reads_16bit(const sn_kernel *k) {
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i]->dtype == SN_BF16 || k->args[i]->dtype == SN_F16) return true;
    return false;
}

/* Whether instruction i's rounding to its 16- or 8-bit type can be left to its stores: no
 * instruction reads its value and every output storing it has its type (the stores round to
 * nearest even: the same bits; a value rounded, widened and packed again cost 2.5 instructions
 * where the store's packing takes 0.5, 2026-11-29 SASS). */
static bool rounded_by_stores(const sn_kernel *k, int i) {
    const sn_dtype dt = k->instr[i].node->dtype;
    if (dt != SN_BF16 && dt != SN_F16 && !sn_dtype_is_f8(dt)) return false;
    for (int j = 0; j < k->n_instr; j++)
        for (int t = 0; t < k->instr[j].n_in; t++)
            if (k->instr[j].in[t].kind == SN_REF_INSTR && k->instr[j].in[t].index == i) return false;
    bool stored = false;
    for (int o = 0; o < k->n_out; o++) {
        if (k->store[o] != i) continue;
        if (k->args[o]->dtype != dt) return false;
        stored = true;
    }
    return stored;
}

void sn_cu_emit_instr_at(sn_cu_text *t, const sn_kernel *k, int i, const char *sfx, const char *index) {
    const sn_pw_instr *in = &k->instr[i];
    const sn_node *n = in->node;
    char v[48], x[3][48], rhs[200];
    for (int j = 0; j < in->n_in; j++) sn_cu_operand(k, &in->in[j], sfx, x[j], sizeof x[j]);
    /* a kernel reading 16-bit inputs takes its exponentials and sigmoids on the SFU (the
     * prelude's _approx forms: expf and the division took about 20 instructions a sigmoid;
     * SmolLM2's SwiGLU backward about 87 an element, more than its bytes allow at the H200's
     * bandwidth, 2026-11-29 SASS) */
    const char *ap = sn_cu_reads_16bit(k) ? "_approx" : "";
    switch (n->op) {
    case SN_OP_ADD: snprintf(rhs, sizeof rhs, "%s + %s", x[0], x[1]); break;
    case SN_OP_SUB: snprintf(rhs, sizeof rhs, "%s - %s", x[0], x[1]); break;
    case SN_OP_MUL: snprintf(rhs, sizeof rhs, "%s * %s", x[0], x[1]); break;
    case SN_OP_DIV: snprintf(rhs, sizeof rhs, "%s / %s", x[0], x[1]); break;
    case SN_OP_EQ: snprintf(rhs, sizeof rhs, "sn_eq(%s, %s)", x[0], x[1]); break;
    case SN_OP_NEG: snprintf(rhs, sizeof rhs, "-%s", x[0]); break;
    case SN_OP_SCALE: {
        char f[32];
        snprintf(rhs, sizeof rhs, "%s * %s", sn_cu_float_lit(n->a.f, f, sizeof f), x[0]);
        break;
    }
    case SN_OP_EXP: snprintf(rhs, sizeof rhs, "%s(%s)", *ap ? "sn_exp_approx" : "expf", x[0]); break;
    case SN_OP_LOG: snprintf(rhs, sizeof rhs, "logf(%s)", x[0]); break;
    case SN_OP_TANH: snprintf(rhs, sizeof rhs, "tanhf(%s)", x[0]); break;
    case SN_OP_SQRT: snprintf(rhs, sizeof rhs, "sqrtf(%s)", x[0]); break;
    case SN_OP_RSQRT: snprintf(rhs, sizeof rhs, "sn_rsqrt(%s)", x[0]); break;
    case SN_OP_GELU: snprintf(rhs, sizeof rhs, "sn_gelu%s(%s)", ap, x[0]); break;
    case SN_OP_SILU: snprintf(rhs, sizeof rhs, "sn_silu%s(%s)", ap, x[0]); break;
    case SN_OP_GELU_BWD: snprintf(rhs, sizeof rhs, "sn_gelu_bwd%s(%s, %s)", ap, x[0], x[1]); break;
    case SN_OP_SILU_BWD: snprintf(rhs, sizeof rhs, "sn_silu_bwd%s(%s, %s)", ap, x[0], x[1]); break;
    case SN_OP_FULL:
        if (in->n_in) snprintf(rhs, sizeof rhs, "%s", x[0]);
        else sn_cu_float_lit(n->a.f, rhs, sizeof rhs);
        break;
    case SN_OP_CONCAT: /* the parts are masked accesses: exactly one is not 0 */
        snprintf(rhs, sizeof rhs, "%s + %s%s%s", x[0], in->n_in > 1 ? x[1] : "0.0f",
                 in->n_in > 2 ? " + " : "", in->n_in > 2 ? x[2] : "");
        break;
    case SN_OP_POW2_SCALE: { /* f = mf 2^ef, passed as ef and mf 2^24 (the prelude's) */
        int ef;
        double mf = frexp(n->a.f, &ef);
        SN_ASSERT(n->a.f > 0 && isfinite(n->a.f)); /* the shape rule's */
        snprintf(rhs, sizeof rhs, "sn_pow2_scale(%s, %d, %uu)", x[0], ef, (unsigned)ldexp(mf, 24));
        break;
    }
    case SN_OP_DROPOUT: { /* element `index` of the kernel's space, which is the dropout's shape */
        char sc[32];
        SN_ASSERT(index && in->n_in == 2);
        snprintf(rhs, sizeof rhs, "sn_dropout(%s, %s, 0x%08xu, 0x%08xu, %s, (unsigned)(%s))", x[0],
                 x[1], (unsigned)n->a.site * 0x7feb352du + 0x68e31da4u,
                 sn_dropout_threshold(n->a.f), sn_cu_float_lit(sn_dropout_scale(n->a.f), sc, sizeof sc),
                 index);
        break;
    }
    default: /* cast to a float type, or a view's copy */
        SN_ASSERT((n->op == SN_OP_CAST || sn_pw_is_identity(n->op)) && in->n_in >= 1);
        snprintf(rhs, sizeof rhs, "%s", x[0]);
        break;
    }
    sn_cu_var_name(k, i, sfx, v, sizeof v);
    if (rounded_by_stores(k, i))
        sn_cu_emitf(t, "const float %s = %s; /* rounded to %s by its stores */", v, rhs,
                    sn_dtype_name(n->dtype));
    else if (n->dtype == SN_BF16) sn_cu_emitf(t, "const float %s = sn_round_bf16(%s);", v, rhs);
    else if (n->dtype == SN_F16) sn_cu_emitf(t, "const float %s = sn_round_f16(%s);", v, rhs);
    else if (sn_dtype_is_f8(n->dtype))
        sn_cu_emitf(t, "const float %s = sn_round_%s(%s);", v, sn_dtype_name(n->dtype), rhs);
    else if (n->dtype == SN_I32) sn_cu_emitf(t, "const float %s = truncf(%s);", v, rhs);
    else sn_cu_emitf(t, "const float %s = %s;", v, rhs);
}

sn_status sn_cu_check_dtype(const sn_kernel *k, const sn_node *n, sn_err *e) {
    if (n->dtype == SN_F32 || n->dtype == SN_BF16 || n->dtype == SN_F16 || n->dtype == SN_I32 ||
        sn_dtype_is_f8(n->dtype))
        return SN_OK;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: node %%%d (%s) is %s; the CUDA "
                   "backend generates f32, bf16, f16, i32, f8e4m3 and f8e5m2 values only", k->name,
                   n->id, sn_op_name(n->op), sn_dtype_name(n->dtype));
}

sn_status sn_cu_check_dtype_no_f8(const sn_kernel *k, const sn_node *n, sn_err *e) {
    bool out8 = false; /* a row kernel's output cast to 8 bits (the classifier's dlogits for the
                          fp8 pass): stored a byte at a time through the prelude's sn_store */
    for (int i = 0; i < k->n_out && k->kind == SN_KER_ROW; i++)
        out8 |= k->args[i] == n && n->op == SN_OP_CAST;
    if (sn_dtype_is_f8(n->dtype) && !out8)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s (%s): node %%%d (%s) is %s: the "
                       "CUDA backend reads and writes 8-bit floats in pointwise kernels (and stores "
                       "a row kernel's output so), not yet elsewhere in %s kernels (cast to f32 in "
                       "a pointwise kernel before it)", k->name,
                       sn_kernel_kind_name(k->kind), n->id, sn_op_name(n->op),
                       sn_dtype_name(n->dtype), sn_kernel_kind_name(k->kind));
    return sn_cu_check_dtype(k, n, e);
}

void sn_cu_check_name(const sn_kernel *k) {
    for (const char *c = k->name; *c; c++) /* the name is the kernel's C identifier */
        SN_ASSERT(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (c > k->name && *c >= '0' && *c <= '9'));
}

void sn_cu_emit_signature(sn_cu_text *t, const sn_kernel *k, const char *fname, int threads) {
    sn_cu_emit_signature_min(t, k, fname, threads, 0);
}

void sn_cu_emit_signature_min(sn_cu_text *t, const sn_kernel *k, const char *fname, int threads,
                              int min_blocks) {
    char arg[16], type[96], decl[96], lead[80], shape[80];
    int nargs = k->n_out + k->n_in, indent = (int)strlen(fname) + 1;
    bool scratch = k->stage != SN_SUM_WHOLE; /* the partial sums, after the args (kernel.h) */
    bool tail = k->tail != NULL;             /* a joined FINISH's buffers after those */
    snprintf(lead, sizeof lead, "%s(", fname);
    if (min_blocks > 0)
        sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d, %d)", threads, min_blocks);
    else
        sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d)", threads);
    for (int i = 0; i < nargs; i++) { /* one parameter a line, the first after the name */
        const sn_node *n = k->args[i];
        snprintf(decl, sizeof decl, "%s%s *__restrict__ %s%s", i < k->n_out ? "" : "const ",
                 sn_cu_ctype(n->dtype), sn_cu_arg_name(k, i, arg, sizeof arg),
                 i + 1 < nargs || scratch || tail ? "," : ")");
        snprintf(type, sizeof type, "%s%s", sn_dtype_name(n->dtype),
                 sn_shape_str(n->rank, n->shape, shape, sizeof shape));
        sn_cu_emitf(t, "%-*s%-36s /* %s */", indent, i ? "" : lead, decl, type);
    }
    if (scratch) {
        snprintf(decl, sizeof decl, "%sfloat *__restrict__ scratch%s",
                 k->stage == SN_SUM_FINISH ? "const " : "", tail ? "," : ")");
        if (k->kind == SN_KER_GATHER) /* embedding_bwd's buckets (kernel.h) */
            sn_cu_emitf(t, "%-*s%-36s /* u32[%lld,%lld] table, i32[%lld,%lld] order */", indent,
                        "", decl, (long long)sn_gather_chunks(k), (long long)k->anchor->shape[0],
                        (long long)sn_gather_chunks(k), (long long)sn_gather_chunk(k));
        else if (sn_split_parts(k) > 1) /* the decode split's parts (kernel.h) */
            sn_cu_emitf(t, "%-*s%-36s /* f32[%lld]: %lld parts' results */", indent, "", decl,
                        (long long)(sn_kernel_scratch_bytes(k) / 4), (long long)sn_split_parts(k));
        else
            sn_cu_emitf(t, "%-*s%-36s /* f32[%lld,%lld]: partial sums */", indent, "", decl,
                        (long long)sn_sum_chunks(k), (long long)sn_sum_width(k));
    }
    if (tail) sn_cu_tail_params(t, k, indent);
    sn_cu_emitf(t, "{");
    if (tail) sn_cu_tail_dispatch(t, k, fname);
}

const char *sn_cu_index_type(int64_t reach) { return reach < INT32_MAX ? "int" : "long long"; }
