/* cuda_pointwise.c: pointwise kernels as CUDA C: a grid-stride loop over the elements of the
 * index space, each reading its accesses, evaluating the fused ops in f32, storing the outputs.
 * Convention: the index space is simplified first (pointwise.h: size-1 dims dropped, dims
 * no access tells apart merged), so an element's coordinates cost only the divisions the
 * accesses need. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "program/pointwise.h"

/* ---- the index space ---- */

/* Whether access x walks the space in row-major order, so its index is offset + i. */
static bool is_linear(const sn_pw_space *s, const sn_access *x) {
    int64_t st = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        if (x->stride[d] != st) return false;
        st *= s->shape[d];
    }
    return !x->masked;
}

/* The simplified space of k (pointwise.h), then what the CUDA loop needs besides: masks
 * that cover their whole axis dropped, empty ones read as 0, the coordinates the accesses use
 * (need[d]), and the index type, returned: "int" when every index fits, else "long long". */
static const char *fill_space(const sn_kernel *k, sn_pw_space *s, bool need[SN_MAX_RANK]) {
    int na = k->n_access;
    sn_pw_space_fill(s, k);
    /* a mask covering its whole axis is no mask */
    for (int a = 0; a < na; a++) {
        sn_access *x = &s->acc[a];
        if (x->masked && x->mask_lo <= 0 && x->mask_hi >= s->shape[x->mask_axis]) x->masked = false;
        if (x->masked && x->mask_lo >= x->mask_hi) s->zero[a] = true;
    }
    /* the coordinates the accesses use, and the widest index any of them forms */
    int64_t widest = sn_shape_numel(s->rank, s->shape) + SN_CUDA_PW_BLOCK * SN_CUDA_PW_MAX_GRID;
    for (int a = 0; a < na; a++) {
        const sn_access *x = &s->acc[a];
        if (s->zero[a]) continue;
        int64_t reach = llabs(x->offset);
        for (int d = 0; d < s->rank; d++) reach += llabs(x->stride[d]) * (s->shape[d] - 1);
        if (reach > widest) widest = reach;
        if (is_linear(s, x)) continue;
        for (int d = 0; d < s->rank; d++)
            if (x->stride[d]) need[d] = true;
        if (x->masked) need[x->mask_axis] = true;
    }
    return widest < INT32_MAX ? "int" : "long long";
}

/* ---- checks ---- */

static sn_status check_dtype(const sn_kernel *k, const sn_node *n, sn_err *e) {
    if (n->dtype == SN_F32 || n->dtype == SN_BF16 || n->dtype == SN_I32) return SN_OK;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: node %%%d (%s) is %s; the CUDA "
                   "backend generates f32, bf16 and i32 values only (use bf16 for half "
                   "precision)", k->name, n->id, sn_op_name(n->op), sn_dtype_name(n->dtype));
}

static sn_status check(const sn_kernel *k, sn_err *e) {
    if (k->kind != SN_KER_POINTWISE)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s is a %s kernel; the CUDA backend "
                       "generates pointwise kernels only so far", k->name,
                       sn_kernel_kind_name(k->kind));
    SN_ASSERT(k->n_access <= SN_KER_MAX_ARGS);
    for (const char *c = k->name; *c; c++) /* the name is the kernel's C identifier */
        SN_ASSERT(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (c > k->name && *c >= '0' && *c <= '9'));
    char who[80];
    snprintf(who, sizeof who, "cuda: kernel %s", k->name);
    return sn_pw_check(k, who, check_dtype, e);
}

/* ---- names and literals ---- */

static const char *ctype(sn_dtype t) {
    switch (t) {
    case SN_F32: return "float";
    case SN_BF16: return "sn_bf16";
    case SN_I32: return "int";
    default: SN_ASSERT(0);
    }
}

/* "out0" or "in2": the parameter holding args[i]. */
static const char *arg_name(const sn_kernel *k, int i, char *buf, size_t len) {
    snprintf(buf, len, i < k->n_out ? "out%d" : "in%d", i < k->n_out ? i : i - k->n_out);
    return buf;
}

/* "gelu_41": the variable holding instruction i's value. */
static const char *var_name(const sn_kernel *k, int i, char *buf, size_t len) {
    const sn_node *n = k->instr[i].node;
    snprintf(buf, len, "%s_%d", sn_op_name(n->op), n->id);
    return buf;
}

/* A float literal C and CUDA read back exactly: "0.5f", "2.0f", "(-SN_INF)". */
static const char *float_lit(float v, char *buf, size_t len) {
    if (isnan(v)) return snprintf(buf, len, "(SN_INF - SN_INF)"), buf;
    if (isinf(v)) return snprintf(buf, len, v < 0 ? "(-SN_INF)" : "SN_INF"), buf;
    snprintf(buf, len, "%.9g", (double)v);
    if (!strpbrk(buf, ".e")) strncat(buf, ".0", len - strlen(buf) - 1);
    strncat(buf, "f", len - strlen(buf) - 1);
    return buf;
}

static const char *operand(const sn_kernel *k, const sn_ref *r, char *buf, size_t len) {
    switch (r->kind) {
    case SN_REF_INSTR: return var_name(k, r->index, buf, len);
    case SN_REF_ACCESS: return snprintf(buf, len, "x%d", r->index), buf;
    case SN_REF_CONST: return float_lit(r->value, buf, len);
    }
    SN_ASSERT(0);
}

/* The fused expression for the comment: "gelu(add(%40, %12))", cut short when long. */
static void describe(const sn_kernel *k, const sn_ref *r, char *buf, size_t len) {
    size_t at = strlen(buf);
    if (at + 8 >= len) return;
    if (r->kind == SN_REF_ACCESS) {
        snprintf(buf + at, len - at, "%%%d", k->args[k->access[r->index].arg]->id);
    } else if (r->kind == SN_REF_CONST) {
        char lit[32];
        snprintf(buf + at, len - at, "%s", float_lit(r->value, lit, sizeof lit));
    } else {
        const sn_pw_instr *in = &k->instr[r->index];
        snprintf(buf + at, len - at, "%s(", sn_op_name(in->node->op));
        for (int j = 0; j < in->n_in; j++) {
            if (j) strncat(buf, ", ", len - strlen(buf) - 1);
            describe(k, &in->in[j], buf, len);
        }
        strncat(buf, ")", len - strlen(buf) - 1);
    }
    if (strlen(buf) + 8 >= len) strcpy(buf + len - 8, "...");
}

/* ---- the kernel ---- */

static void emit_header(sn_cu_text *t, const sn_kernel *k, const sn_pw_space *s) {
    char expr[160] = "", type[96], shape[96];
    for (int o = 0; o < k->n_out; o++) {
        if (o) strncat(expr, ", ", sizeof expr - strlen(expr) - 1);
        describe(k, &(sn_ref){.kind = SN_REF_INSTR, .index = k->store[o]}, expr, sizeof expr);
    }
    sn_cu_emitf(t, "/* %s: %s", k->name, expr);
    sn_cu_emitf(t, " * over %s (%lld elements), walked as %s */", sn_type_str(k->args[0], type,
                sizeof type), (long long)sn_shape_numel(k->rank, k->shape),
                sn_shape_str(s->rank, s->shape, shape, sizeof shape));
}

static void emit_signature(sn_cu_text *t, const sn_kernel *k) {
    char arg[16], type[96], decl[96], lead[80];
    int nargs = k->n_out + k->n_in, indent = (int)strlen(k->name) + 1;
    snprintf(lead, sizeof lead, "%s(", k->name);
    sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d)", SN_CUDA_PW_BLOCK);
    for (int i = 0; i < nargs; i++) { /* one parameter a line, the first after the name */
        const sn_node *n = k->args[i];
        snprintf(decl, sizeof decl, "%s%s *__restrict__ %s%s", i < k->n_out ? "" : "const ",
                 ctype(n->dtype), arg_name(k, i, arg, sizeof arg), i + 1 < nargs ? "," : ")");
        sn_cu_emitf(t, "%-*s%-36s /* %%%d %s%s%s %s */", indent, i ? "" : lead, decl, n->id,
                    sn_op_name(n->op), n->name ? " " : "", n->name ? n->name : "",
                    sn_type_str(n, type, sizeof type));
    }
}

/* "x2 = i1 < 5 ? sn_load(in1[i0 * 40 + i1 - 3]) : 0.0f": access a's value at element i. */
static void emit_access(sn_cu_text *t, const sn_kernel *k, const sn_pw_space *s, int a) {
    const sn_access *x = &s->acc[a];
    char arg[16];
    if (s->zero[a]) {
        sn_cu_emitf(t, "const float x%d = 0.0f; /* %%%d: masked out everywhere */", a,
                    k->args[x->arg]->id);
        return;
    }
    sn_cu_text ix = {0}; /* the index expression */
    if (is_linear(s, x)) sn_cu_appendf(&ix, "i");
    for (int d = 0; d < s->rank && !is_linear(s, x); d++) {
        if (!x->stride[d]) continue;
        sn_cu_appendf(&ix, "%si%d", ix.len ? " + " : "", d);
        if (x->stride[d] != 1) sn_cu_appendf(&ix, " * %lld", (long long)x->stride[d]);
    }
    if (!ix.len) sn_cu_appendf(&ix, "%lld", (long long)x->offset);
    else if (x->offset) sn_cu_appendf(&ix, " %c %lld", x->offset < 0 ? '-' : '+', llabs(x->offset));
    size_t oom = ix.oom;
    char *idx = sn_cu_finish(&ix);
    if (!idx) { /* out of memory: sticky in t */
        t->oom = oom;
        return;
    }
    arg_name(k, x->arg, arg, sizeof arg);
    int d = x->mask_axis;
    long long lo = x->mask_lo, hi = x->mask_hi;
    if (!x->masked)
        sn_cu_emitf(t, "const float x%d = sn_load(%s[%s]);", a, arg, idx);
    else if (lo <= 0) /* fill_space left only masks that cut the axis */
        sn_cu_emitf(t, "const float x%d = i%d < %lld ? sn_load(%s[%s]) : 0.0f;", a, d, hi, arg,
                    idx);
    else if (hi >= s->shape[d])
        sn_cu_emitf(t, "const float x%d = i%d >= %lld ? sn_load(%s[%s]) : 0.0f;", a, d, lo, arg,
                    idx);
    else
        sn_cu_emitf(t, "const float x%d = i%d >= %lld && i%d < %lld ? sn_load(%s[%s]) : 0.0f;", a,
                    d, lo, d, hi, arg, idx);
    free(idx);
}

static void emit_instr(sn_cu_text *t, const sn_kernel *k, int i) {
    const sn_pw_instr *in = &k->instr[i];
    const sn_node *n = in->node;
    char v[48], x[3][48], rhs[200];
    for (int j = 0; j < in->n_in; j++) operand(k, &in->in[j], x[j], sizeof x[j]);
    switch (n->op) {
    case SN_OP_ADD: snprintf(rhs, sizeof rhs, "%s + %s", x[0], x[1]); break;
    case SN_OP_SUB: snprintf(rhs, sizeof rhs, "%s - %s", x[0], x[1]); break;
    case SN_OP_MUL: snprintf(rhs, sizeof rhs, "%s * %s", x[0], x[1]); break;
    case SN_OP_DIV: snprintf(rhs, sizeof rhs, "%s / %s", x[0], x[1]); break;
    case SN_OP_EQ: snprintf(rhs, sizeof rhs, "sn_eq(%s, %s)", x[0], x[1]); break;
    case SN_OP_NEG: snprintf(rhs, sizeof rhs, "-%s", x[0]); break;
    case SN_OP_SCALE: {
        char f[32];
        snprintf(rhs, sizeof rhs, "%s * %s", float_lit(n->a.f, f, sizeof f), x[0]);
        break;
    }
    case SN_OP_EXP: snprintf(rhs, sizeof rhs, "expf(%s)", x[0]); break;
    case SN_OP_LOG: snprintf(rhs, sizeof rhs, "logf(%s)", x[0]); break;
    case SN_OP_TANH: snprintf(rhs, sizeof rhs, "tanhf(%s)", x[0]); break;
    case SN_OP_SQRT: snprintf(rhs, sizeof rhs, "sqrtf(%s)", x[0]); break;
    case SN_OP_RSQRT: snprintf(rhs, sizeof rhs, "sn_rsqrt(%s)", x[0]); break;
    case SN_OP_GELU: snprintf(rhs, sizeof rhs, "sn_gelu(%s)", x[0]); break;
    case SN_OP_SILU: snprintf(rhs, sizeof rhs, "sn_silu(%s)", x[0]); break;
    case SN_OP_GELU_BWD: snprintf(rhs, sizeof rhs, "sn_gelu_bwd(%s, %s)", x[0], x[1]); break;
    case SN_OP_SILU_BWD: snprintf(rhs, sizeof rhs, "sn_silu_bwd(%s, %s)", x[0], x[1]); break;
    case SN_OP_FULL:
        if (in->n_in) snprintf(rhs, sizeof rhs, "%s", x[0]);
        else float_lit(n->a.f, rhs, sizeof rhs);
        break;
    case SN_OP_CONCAT: /* the parts are masked accesses: exactly one is not 0 */
        snprintf(rhs, sizeof rhs, "%s + %s%s%s", x[0], in->n_in > 1 ? x[1] : "0.0f",
                 in->n_in > 2 ? " + " : "", in->n_in > 2 ? x[2] : "");
        break;
    default: /* cast to a float type, or a view's copy */
        SN_ASSERT((n->op == SN_OP_CAST || sn_pw_is_identity(n->op)) && in->n_in >= 1);
        snprintf(rhs, sizeof rhs, "%s", x[0]);
        break;
    }
    var_name(k, i, v, sizeof v);
    if (n->dtype == SN_BF16) sn_cu_emitf(t, "const float %s = sn_round_bf16(%s);", v, rhs);
    else if (n->dtype == SN_I32) sn_cu_emitf(t, "const float %s = truncf(%s);", v, rhs);
    else sn_cu_emitf(t, "const float %s = %s;", v, rhs);
}

static void emit_kernel(sn_cu_text *t, const sn_kernel *k) {
    sn_pw_space s;
    bool need[SN_MAX_RANK] = {0};
    const char *ix = fill_space(k, &s, need);
    emit_header(t, k, &s);
    emit_signature(t, k);
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const %s n = %lld;", ix, (long long)sn_shape_numel(s.rank, s.shape));
    sn_cu_emitf(t, "for (%s i = sn_thread_index(); i < n; i += sn_thread_count()) {", ix);
    int64_t inner = 1; /* coordinates of element i in the simplified space */
    for (int d = s.rank - 1; d >= 0; d--) {
        if (need[d] && d == 0 && inner == 1)
            sn_cu_emitf(t, "const %s i0 = i;", ix);
        else if (need[d] && d == 0)
            sn_cu_emitf(t, "const %s i0 = i / %lld;", ix, (long long)inner);
        else if (need[d] && inner == 1)
            sn_cu_emitf(t, "const %s i%d = i %% %lld;", ix, d, (long long)s.shape[d]);
        else if (need[d])
            sn_cu_emitf(t, "const %s i%d = i / %lld %% %lld;", ix, d, (long long)inner,
                        (long long)s.shape[d]);
        inner *= s.shape[d];
    }
    for (int a = 0; a < k->n_access; a++) emit_access(t, k, &s, a);
    for (int i = 0; i < k->n_instr; i++) emit_instr(t, k, i);
    for (int o = 0; o < k->n_out; o++) {
        char arg[16], v[48];
        sn_cu_emitf(t, "sn_store(&%s[i], %s);", arg_name(k, o, arg, sizeof arg),
                    var_name(k, k->store[o], v, sizeof v));
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "SN_HOST_STUB(%s)", k->name);
}

sn_cuda_dims sn_cuda_pointwise_dims(const sn_kernel *k) {
    int64_t blocks = (k->n_items + SN_CUDA_PW_BLOCK - 1) / SN_CUDA_PW_BLOCK;
    if (blocks > SN_CUDA_PW_MAX_GRID) blocks = SN_CUDA_PW_MAX_GRID;
    if (blocks < 1) blocks = 1;
    return (sn_cuda_dims){.grid = {(unsigned)blocks, 1, 1}, .block = {SN_CUDA_PW_BLOCK, 1, 1}};
}

sn_status sn_cuda_render(const sn_kernel *const *ks, int n, char **src, sn_err *e) {
    *src = NULL;
    for (int i = 0; i < n; i++) {
        sn_status st = check(ks[i], e);
        if (st) return st;
    }
    sn_cu_text t = {0};
    sn_cu_emitf(&t, "/* generated by sinter: %d pointwise kernel%s */", n, n == 1 ? "" : "s");
    sn_cu_emitf(&t, "#include \"%s\"", SN_CUDA_PRELUDE_NAME);
    for (int i = 0; i < n; i++) {
        sn_cu_emitf(&t, "%s", "");
        emit_kernel(&t, ks[i]);
    }
    size_t oom = t.oom;
    if (!(*src = sn_cu_finish(&t))) return sn_fail_oom(e, oom, "the CUDA C source of a kernel");
    return SN_OK;
}
