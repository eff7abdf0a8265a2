/* cuda_pointwise.c: pointwise kernels as CUDA C: a grid-stride loop over the elements of the
 * index space, each reading its accesses, evaluating the fused ops in f32, storing the outputs;
 * several elements a step when the innermost dim allows: eight where a bf16/f16 buffer takes
 * part (one 16-byte load or store of 8 values, f32 buffers as two float4), else four (float4);
 * an access that cannot (misaligned, strided, masked along the row) reads one value a lane,
 * as 8-bit float buffers always do (a byte each, converted by the prelude; no vector form yet).
 * Convention: the index space is simplified first (pointwise.h: size-1 dims dropped, dims
 * no access tells apart merged), so an element's coordinates cost only the divisions the
 * accesses need. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
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
    int64_t widest = sn_shape_numel(s->rank, s->shape) + 8 * SN_CUDA_PW_BLOCK * SN_CUDA_PW_MAX_GRID; /* 8 lanes */
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

/* ---- the kernel ---- */

enum { MAX_LANES = 8 }; /* elements of one 16-byte vector of 16-bit values */

/* Elements a step: 8 when a 16-bit buffer takes part and the innermost extent allows, 4 (a
 * float4) when it allows that, else 1. */
static int lanes_of(const sn_kernel *k, const sn_pw_space *s) {
    int64_t inner = s->shape[s->rank - 1];
    bool half = false;
    for (int i = 0; i < k->n_out + k->n_in; i++)
        half = half || sn_dtype_bits(k->args[i]->dtype) == 16;
    return half && inner % 8 == 0 ? 8 : inner % 4 == 0 ? 4 : 1;
}

int sn_cu_pointwise_lanes(const sn_kernel *k) {
    sn_pw_space s;
    sn_pw_space_fill(&s, k);
    return lanes_of(k, &s);
}

void sn_cu_header_pointwise(sn_cu_text *t, const sn_kernel *k) {
    sn_pw_space s;
    sn_pw_space_fill(&s, k);
    char expr[160] = "", type[96], shape[96];
    for (int o = 0; o < k->n_out; o++) {
        if (o) strncat(expr, ", ", sizeof expr - strlen(expr) - 1);
        sn_cu_describe(k, &(sn_ref){.kind = SN_REF_INSTR, .index = k->store[o]}, expr,
                       sizeof expr);
    }
    sn_cu_emitf(t, "/* %s: %s", k->name, expr);
    sn_cu_emitf(t, " * over %s (%lld elements), walked as %s */", sn_type_str(k->args[0], type,
                sizeof type), (long long)sn_shape_numel(k->rank, k->shape),
                sn_shape_str(s.rank, s.shape, shape, sizeof shape));
}

/* The index of access x at the element whose coordinates are i0.. (i: its linear index). */
static char *index_expr(const sn_pw_space *s, const sn_access *x) {
    sn_cu_text ix = {0};
    if (is_linear(s, x)) sn_cu_appendf(&ix, "i");
    for (int d = 0; d < s->rank && !is_linear(s, x); d++) {
        if (!x->stride[d]) continue;
        sn_cu_appendf(&ix, "%si%d", ix.len ? " + " : "", d);
        if (x->stride[d] != 1) sn_cu_appendf(&ix, " * %lld", (long long)x->stride[d]);
    }
    if (!ix.len) sn_cu_appendf(&ix, "%lld", (long long)x->offset);
    else if (x->offset) sn_cu_appendf(&ix, " %c %lld", x->offset < 0 ? '-' : '+', llabs(x->offset));
    return sn_cu_finish(&ix);
}

/* The condition under which access x reads at coordinate `c` of its mask axis ("" if none). */
static void mask_cond(const sn_pw_space *s, const sn_access *x, const char *c, char *buf,
                      size_t len) {
    long long lo = x->mask_lo, hi = x->mask_hi;
    buf[0] = '\0';
    if (!x->masked) return;
    if (lo <= 0) snprintf(buf, len, "%s < %lld", c, hi); /* fill_space left masks that cut */
    else if (hi >= s->shape[x->mask_axis]) snprintf(buf, len, "%s >= %lld", c, lo);
    else snprintf(buf, len, "%s >= %lld && %s < %lld", c, lo, c, hi);
}

/* Values of buffer type t in 16 bytes (f32 4, bf16/f16 8; 0: no vector loads, i32). */
static int per_vector(sn_dtype t) { return t == SN_F32 ? 4 : t == SN_BF16 || t == SN_F16 ? 8 : 0; }

/* Whether access x can be 16-byte loads in a step of `lanes` elements (f32: lanes / 4 float4s;
 * bf16/f16: one load of 8): contiguous along the innermost dim, each load's first element
 * 16-byte aligned, the mask (if any) on another dim. */
static bool access_vector(const sn_kernel *k, const sn_pw_space *s, const sn_access *x, int lanes) {
    int last = s->rank - 1, g = per_vector(k->args[x->arg]->dtype);
    if (!g || lanes % g || x->stride[last] != 1 || x->offset % g) return false;
    for (int d = 0; d < last; d++)
        if (x->stride[d] % g) return false;
    return !x->masked || x->mask_axis != last;
}

/* x<a><sfx> for every lane (sfx "" in scalar mode, "_0".."_<lanes - 1>" in vector mode). */
static void emit_access(sn_cu_text *t, const sn_kernel *k, const sn_pw_space *s, int a,
                        int lanes) {
    const sn_access *x = &s->acc[a];
    char arg[16], cond[96], coord[32];
    int last = s->rank - 1;
    bool vec = lanes > 1;
    if (s->zero[a]) {
        for (int l = 0; l < lanes; l++)
            sn_cu_emitf(t, vec ? "const float x%d_%d = 0.0f; /* masked out everywhere */"
                               : "const float x%d = 0.0f; /* masked out everywhere */", a, l);
        return;
    }
    char *idx = index_expr(s, x);
    if (!idx) {
        t->oom = 1;
        return;
    }
    sn_cu_arg_name(k, x->arg, arg, sizeof arg);
    snprintf(coord, sizeof coord, "i%d", x->mask_axis);
    if (!vec) {
        mask_cond(s, x, coord, cond, sizeof cond);
        if (cond[0]) sn_cu_emitf(t, "const float x%d = %s ? sn_load(%s[%s]) : 0.0f;", a, cond, arg, idx);
        else sn_cu_emitf(t, "const float x%d = sn_load(%s[%s]);", a, arg, idx);
    } else if (access_vector(k, s, x, lanes) && k->args[x->arg]->dtype != SN_F32) {
        mask_cond(s, x, coord, cond, sizeof cond); /* eight 16-bit values, one 16-byte load */
        if (cond[0]) {
            sn_cu_emitf(t, "float x%d_v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};", a);
            sn_cu_emitf(t, "if (%s) sn_load8(&%s[%s], x%d_v);", cond, arg, idx, a);
        } else {
            sn_cu_emitf(t, "float x%d_v[8];", a);
            sn_cu_emitf(t, "sn_load8(&%s[%s], x%d_v);", arg, idx, a);
        }
        sn_cu_emitf(t, "const float x%d_0 = x%d_v[0], x%d_1 = x%d_v[1], x%d_2 = x%d_v[2], "
                    "x%d_3 = x%d_v[3];", a, a, a, a, a, a, a, a);
        sn_cu_emitf(t, "const float x%d_4 = x%d_v[4], x%d_5 = x%d_v[5], x%d_6 = x%d_v[6], "
                    "x%d_7 = x%d_v[7];", a, a, a, a, a, a, a, a);
    } else if (access_vector(k, s, x, lanes) && lanes == 8) { /* f32: two float4 */
        mask_cond(s, x, coord, cond, sizeof cond);
        for (int h = 0; h < 2; h++) {
            char at[64];
            snprintf(at, sizeof at, h ? "%s + 4" : "%s", idx);
            if (cond[0])
                sn_cu_emitf(t, "const float4 x%d_v%d = %s ? *reinterpret_cast<const float4 *>(&%s[%s]) "
                            ": make_float4(0.0f, 0.0f, 0.0f, 0.0f);", a, h, cond, arg, at);
            else
                sn_cu_emitf(t, "const float4 x%d_v%d = *reinterpret_cast<const float4 *>(&%s[%s]);",
                            a, h, arg, at);
            sn_cu_emitf(t, "const float x%d_%d = x%d_v%d.x, x%d_%d = x%d_v%d.y, x%d_%d = x%d_v%d.z, "
                        "x%d_%d = x%d_v%d.w;", a, 4 * h, a, h, a, 4 * h + 1, a, h, a, 4 * h + 2, a, h,
                        a, 4 * h + 3, a, h);
        }
    } else if (access_vector(k, s, x, lanes)) {
        mask_cond(s, x, coord, cond, sizeof cond);
        if (cond[0])
            sn_cu_emitf(t, "const float4 x%d_v = %s ? *reinterpret_cast<const float4 *>(&%s[%s]) "
                        ": make_float4(0.0f, 0.0f, 0.0f, 0.0f);", a, cond, arg, idx);
        else
            sn_cu_emitf(t, "const float4 x%d_v = *reinterpret_cast<const float4 *>(&%s[%s]);", a,
                        arg, idx);
        sn_cu_emitf(t, "const float x%d_0 = x%d_v.x, x%d_1 = x%d_v.y, x%d_2 = x%d_v.z, "
                    "x%d_3 = x%d_v.w;", a, a, a, a, a, a, a, a);
    } else if (x->stride[last] == 0 && (!x->masked || x->mask_axis != last)) { /* a broadcast */
        mask_cond(s, x, coord, cond, sizeof cond);
        if (cond[0]) sn_cu_emitf(t, "const float x%d_0 = %s ? sn_load(%s[%s]) : 0.0f;", a, cond, arg, idx);
        else sn_cu_emitf(t, "const float x%d_0 = sn_load(%s[%s]);", a, arg, idx);
        sn_cu_emitf(t, "const float x%d_1 = x%d_0, x%d_2 = x%d_0, x%d_3 = x%d_0;", a, a, a, a, a, a);
        if (lanes == 8)
            sn_cu_emitf(t, "const float x%d_4 = x%d_0, x%d_5 = x%d_0, x%d_6 = x%d_0, x%d_7 = x%d_0;",
                        a, a, a, a, a, a, a, a);
    } else { /* one element a lane */
        for (int l = 0; l < lanes; l++) {
            char at[64];
            long long step = (long long)x->stride[last] * l;
            if (step) snprintf(at, sizeof at, "%s %c %lld", idx, step < 0 ? '-' : '+', llabs(step));
            else snprintf(at, sizeof at, "%s", idx);
            if (x->masked && x->mask_axis == last) snprintf(coord, sizeof coord, "(i%d + %d)", last, l);
            mask_cond(s, x, coord, cond, sizeof cond);
            if (cond[0])
                sn_cu_emitf(t, "const float x%d_%d = %s ? sn_load(%s[%s]) : 0.0f;", a, l, cond, arg, at);
            else
                sn_cu_emitf(t, "const float x%d_%d = sn_load(%s[%s]);", a, l, arg, at);
        }
    }
    free(idx);
}

void sn_cu_emit_pointwise(sn_cu_text *t, const sn_kernel *k, const char *fname) {
    sn_pw_space s;
    bool need[SN_MAX_RANK] = {0};
    const char *ix = fill_space(k, &s, need);
    int lanes = lanes_of(k, &s), last = s.rank - 1;
    bool vec = lanes > 1;
    if (vec) /* per-lane masks on the innermost dim read its coordinate */
        for (int a = 0; a < k->n_access; a++)
            if (!s.zero[a] && s.acc[a].masked && s.acc[a].mask_axis == last) need[last] = true;
    sn_cu_emit_signature(t, k, fname, SN_CUDA_PW_BLOCK);
    int64_t numel = sn_shape_numel(s.rank, s.shape);
    sn_cu_emitf(t, "const %s n = %lld;%s", ix, (long long)numel,
                lanes == 8 ? " /* elements; a step does eight */"
                : vec ? " /* elements; a step does four */" : "");
    if (vec)
        sn_cu_emitf(t, "for (%s i = %d * (%s)sn_thread_index(); i < n; i += %d * (%s)sn_thread_count()) {",
                    ix, lanes, ix, lanes, ix);
    else
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
    for (int a = 0; a < k->n_access; a++) emit_access(t, k, &s, a, lanes);
    static const char *const sfx[MAX_LANES] = {"_0", "_1", "_2", "_3", "_4", "_5", "_6", "_7"};
    for (int l = 0; l < lanes; l++) {
        char at[32]; /* the element's index: a dropout's mask reads it */
        snprintf(at, sizeof at, l ? "i + %d" : "i", l);
        for (int i = 0; i < k->n_instr; i++) sn_cu_emit_instr_at(t, k, i, vec ? sfx[l] : "", at);
    }
    for (int o = 0; o < k->n_out; o++) {
        char arg[16], v[MAX_LANES][48];
        sn_dtype dt = k->args[o]->dtype;
        sn_cu_arg_name(k, o, arg, sizeof arg);
        for (int l = 0; l < lanes; l++)
            sn_cu_var_name(k, k->store[o], vec ? sfx[l] : "", v[l], sizeof v[l]);
        if (!vec) {
            sn_cu_emitf(t, "sn_store(&%s[i], %s);", arg, v[0]);
        } else if (dt == SN_F32) {
            for (int h = 0; h < lanes / 4; h++)
                sn_cu_emitf(t, h ? "*reinterpret_cast<float4 *>(&%s[i + 4]) = make_float4(%s, %s, %s, %s);"
                                 : "*reinterpret_cast<float4 *>(&%s[i]) = make_float4(%s, %s, %s, %s);",
                            arg, v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]);
        } else if (lanes == 8 && per_vector(dt) == 8) { /* eight 16-bit values, one store */
            sn_cu_emitf(t, "const float %s_v[8] = {%s, %s, %s, %s,", arg, v[0], v[1], v[2], v[3]);
            sn_cu_emitf(t, "                       %s, %s, %s, %s};", v[4], v[5], v[6], v[7]);
            sn_cu_emitf(t, "sn_store8(&%s[i], %s_v);", arg, arg);
        } else {
            for (int l = 0; l < lanes; l++) sn_cu_emitf(t, "sn_store(&%s[i + %d], %s);", arg, l, v[l]);
        }
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
