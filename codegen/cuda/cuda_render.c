/* cuda_render.c: a program's kernels (all but GEMMs) as one CUDA translation unit, each distinct
 * kernel once. Convention: a kernel's text is rendered under a placeholder name first; kernels
 * whose texts are equal (they differ only in node ids and names) share the first one's function,
 * and fn[i] tells the runtime which function launches kernel i with its own args. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "program/pointwise.h"
#include "program/program.h"
#include "support/hash.h"

#define PLACEHOLDER "sn_kernel_fn"

static sn_status check(const sn_kernel *k, const sn_target *tg, sn_err *e) {
    sn_cu_check_name(k);
    sn_status st = sn_kernel_check(k, e); /* the contract (program/kernel_check.c) */
    if (st) return st;
    /* what the CUDA backend generates of a kernel that keeps it */
    switch (k->kind) {
    case SN_KER_ATTENTION: return sn_cu_check_attention(k, tg, e); /* f16 too */
    case SN_KER_GEMM: return SN_OK; /* skipped: a library call */
    case SN_KER_POINTWISE: case SN_KER_REDUCE: return sn_kernel_dtypes(k, sn_cu_check_dtype, e);
    case SN_KER_ROW: return sn_cu_check_row(k, e);
    case SN_KER_GATHER: return sn_cu_check_gather(k, e);
    case SN_KER_DEQUANT: return sn_cu_check_dequant(k, e);
    case SN_KER_GEMV: case SN_KER_THIN: return SN_OK; /* the contract fixed their dtypes */
    case SN_KER_GRAD_ACC: case SN_KER_SQNORM: case SN_KER_CLIP: case SN_KER_ADAMW: return SN_OK;
    default: break;
    }
    return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s is a %s kernel, which the CUDA "
                   "backend does not generate yet", k->name, sn_kernel_kind_name(k->kind));
}

/* The kernel's function (no header comment, no host stub) named fname. */
static void emit_body(sn_cu_text *t, const sn_kernel *k, const sn_target *tg, const char *fname) {
    sn_cuda_dims d = sn_cuda_launch_dims(k, tg);
    if (k->tail) sn_cu_emit_tail_fn(t, k, &d, fname); /* a joined FINISH's body, before its host */
    switch (k->kind) {
    case SN_KER_POINTWISE: sn_cu_emit_pointwise(t, k, fname); break;
    case SN_KER_ROW: sn_cu_emit_row(t, k, &d, tg, fname); break;
    case SN_KER_REDUCE: sn_cu_emit_reduce(t, k, &d, fname); break;
    case SN_KER_GATHER: sn_cu_emit_gather(t, k, &d, fname); break;
    case SN_KER_DEQUANT: sn_cu_emit_dequant(t, k, &d, fname); break;
    case SN_KER_GEMV: sn_cu_emit_gemv(t, k, &d, fname); break;
    case SN_KER_THIN: sn_cu_emit_thin(t, k, &d, fname); break;
    case SN_KER_GRAD_ACC: case SN_KER_SQNORM: case SN_KER_CLIP:
    case SN_KER_ADAMW: sn_cu_emit_optim(t, k, &d, fname); break;
    case SN_KER_ATTENTION: sn_cu_emit_attention(t, k, tg, fname); break;
    default: SN_ASSERT(0);
    }
}

/* Kernel i's function as the translation unit has it: a blank line, its description, the
 * kernels that share it, the function named after kernel i, its host stub. */
static sn_status function_text(const sn_kernel *const *ks, int n, int i, const int *leader,
                               const sn_target *tg, char **out, sn_err *e) {
    const sn_kernel *k = ks[i];
    sn_cu_text t = {0};
    char line[256];
    sn_cu_emitf(&t, "%s", "");
    sn_kernel_describe(k, line, sizeof line);
    if (k->kind == SN_KER_POINTWISE) sn_cu_header_pointwise(&t, k);
    else sn_cu_emitf(&t, "/* %s */", line);
    int shared = 0, listed = 0;
    for (int j = i + 1; j < n; j++) shared += leader[j] == i;
    for (int j = i + 1; j < n && shared; j++) { /* "also launched as k3, k9 and 4 more" */
        if (leader[j] != i) continue;
        if (listed % 4 == 0) sn_cu_appendf(&t, listed ? ",\n *" : "/* also launched as");
        else sn_cu_appendf(&t, ",");
        sn_cu_appendf(&t, " %s", ks[j]->name);
        if (++listed == shared || listed == 12) {
            if (listed < shared) sn_cu_appendf(&t, " and %d more", shared - listed);
            sn_cu_appendf(&t, " */\n");
            break;
        }
    }
    emit_body(&t, k, tg, k->name);
    sn_cu_emitf(&t, "SN_HOST_STUB(%s)", k->name);
    size_t oom = t.oom;
    return (*out = sn_cu_finish(&t)) ? SN_OK : sn_fail_oom(e, oom, "the CUDA C source of a kernel");
}

/* The translation unit of the kernels of s with part[i] == p (all of them when part is NULL):
 * the prelude's #include, the block reductions if a kernel needs them, each function's text. */
static sn_status assemble(const sn_kernel *const *ks, const sn_cuda_source *s, const sn_target *tg,
                          const int *part, int p, char **out, sn_err *e) {
    int kernels = 0, functions = 0;
    bool reductions = false;
    for (int i = 0; i < s->n_kernels; i++) {
        if (s->leader[i] < 0 || (part && part[i] != p)) continue;
        SN_ASSERT(!part || part[s->leader[i]] == p); /* a function's kernels share its part */
        kernels++;
        functions += s->leader[i] == i;
        reductions = reductions || ks[i]->kind == SN_KER_ROW || ks[i]->kind == SN_KER_REDUCE ||
                     ks[i]->kind == SN_KER_SQNORM;
    }
    sn_cu_text t = {0};
    sn_cu_emitf(&t, "/* generated by sinter for %s: %d kernels as %d functions */", tg->name,
                kernels, functions);
    sn_cu_emitf(&t, "#include \"%s\"", SN_CUDA_PRELUDE_NAME);
    if (reductions) sn_cu_emit_block_reductions(&t);
    for (int i = 0; i < s->n_kernels; i++)
        if (s->leader[i] == i && (!part || part[i] == p)) sn_cu_appendf(&t, "%s", s->text[i]);
    size_t oom = t.oom;
    return (*out = sn_cu_finish(&t)) ? SN_OK : sn_fail_oom(e, oom, "the CUDA C source of a program");
}

sn_status sn_cuda_render_part(const sn_kernel *const *ks, const sn_cuda_source *s,
                              const sn_target *tg, const int *part, int p, char **src, sn_err *e) {
    return assemble(ks, s, tg, part, p, src, e);
}

void sn_cuda_source_free(sn_cuda_source *s) {
    for (int i = 0; s->text && i < s->n_kernels; i++) free(s->text[i]);
    free(s->text);
    free(s->src);
    free(s->fn);
    free(s->leader);
    free(s->fn_bytes);
    *s = (sn_cuda_source){0};
}

sn_status sn_cuda_render(const sn_kernel *const *ks, int n, const sn_target *tg,
                         sn_cuda_source *out, sn_err *e) {
    *out = (sn_cuda_source){.n_kernels = n};
    SN_ASSERT(tg && tg->kind == SN_TARGET_CUDA);
    for (int i = 0; i < n; i++) {
        sn_status st = check(ks[i], tg, e);
        if (st) return st;
    }
    char **body = sn_calloc((size_t)n + 1, sizeof *body, "the CUDA C of a program", e);
    uint64_t *h = sn_calloc((size_t)n + 1, sizeof *h, "the CUDA C of a program", e);
    int *leader = out->leader = sn_calloc((size_t)n + 1, sizeof *leader, "the CUDA C", e);
    out->fn = sn_calloc((size_t)n + 1, sizeof *out->fn, "the CUDA C of a program", e);
    out->fn_bytes = sn_calloc((size_t)n + 1, sizeof *out->fn_bytes, "the CUDA C of a program", e);
    out->text = sn_calloc((size_t)n + 1, sizeof *out->text, "the CUDA C of a program", e);
    sn_status st = SN_OK;
    if (!body || !h || !leader || !out->fn || !out->fn_bytes || !out->text) {
        st = SN_ERR_OOM;
        goto done;
    }
    for (int i = 0; i < n; i++) { /* each kernel's text under the placeholder; its leader */
        const sn_kernel *k = ks[i];
        leader[i] = -1;
        if (k->kind == SN_KER_GEMM) {
            out->n_skipped++;
            continue;
        }
        sn_cu_text t = {0};
        emit_body(&t, k, tg, PLACEHOLDER);
        size_t oom = t.oom;
        if (!(body[i] = sn_cu_finish(&t))) {
            st = sn_fail_oom(e, oom, "the CUDA C source of a kernel");
            goto done;
        }
        h[i] = sn_hash_str(body[i], SN_HASH_INIT);
        leader[i] = i;
        for (int j = 0; j < i && leader[i] == i; j++)
            if (leader[j] == j && h[j] == h[i] && strcmp(body[j], body[i]) == 0) leader[i] = j;
        snprintf(out->fn[i], sizeof out->fn[i], "%s", ks[leader[i]]->name);
        if (leader[i] == i) {
            out->n_functions++;
            out->fn_bytes[i] = strlen(body[i]);
        }
    }
    for (int i = 0; i < n && !st; i++) /* each function's text, which parts are made of */
        if (leader[i] == i) st = function_text(ks, n, i, leader, tg, &out->text[i], e);
    if (!st) st = assemble(ks, out, tg, NULL, 0, &out->src, e);
done:
    for (int i = 0; body && i < n; i++) free(body[i]);
    free(body);
    free(h);
    if (st) sn_cuda_source_free(out);
    return st;
}
