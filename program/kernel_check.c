/* kernel_check.c: the contract of kernel.h checked once, for every code generator (issue 20):
 * what the pass that made a kernel promises about its kind, anchors, args, accesses and work
 * split. The fuse pass checks each kernel it makes, the pipeline every kernel of the program
 * after each kernel pass (passes/pipeline.c), and the CUDA and LLVM generators the kernels they
 * are given (a test may build one by hand), then render from the per-kind plans instead of
 * checking again. A kernel that breaks the contract is a bug in whatever made it:
 * SN_ERR_INTERNAL. The row kernels' contract and plan are kernel_row.c's. */
#include <stdarg.h>
#include <stdio.h>

#include "pointwise.h"
#include "program.h"

#define BUG(...) sn_kernel_bug(k, e, __VA_ARGS__)

sn_status sn_kernel_bug(const sn_kernel *k, sn_err *e, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: %s (a bug in the pass that made it)", k->name, msg);
}

/* ---- attention ---- */

/* Whether attention kernel k's anchor2 is what it may be: the attention_lse the forward reads
 * (both written), or the attention_bwd_v of attention_bwd_k's six inputs (dk and dv in one). */
static bool anchor2_ok(const sn_node *n, const sn_node *a2) {
    if (!a2) return true;
    if (n->op == SN_OP_ATTENTION) return a2->op == SN_OP_ATTENTION_LSE && a2 == n->in[3];
    bool kv = n->op == SN_OP_ATTENTION_BWD_K && a2->op == SN_OP_ATTENTION_BWD_V && a2->a.f == n->a.f;
    for (int i = 0; kv && i < 6; i++) kv = a2->in[i] == n->in[i];
    return kv;
}

sn_status sn_kernel_check_attention(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor, *a2 = k->anchor2;
    if (k->kind != SN_KER_ATTENTION || !n || sn_op_kind(n->op) != SN_K_ATTENTION)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an attention kernel needs an attention op "
                       "as anchor (a bug in the fuse pass)", k->name);
    if (!anchor2_ok(n, a2))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: anchor2 must be the attention_lse the "
                       "attention reads, or the attention_bwd_v of attention_bwd_k's inputs (a bug "
                       "in the fuse pass)", k->name);
    bool by_kv = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V;
    if (k->dkv_parts && (!by_kv || k->stage == SN_SUM_WHOLE || sn_att_dkv_parts(k) < 2))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: dk and dv in parts (kernel.h) are a "
                       "PARTIAL and a FINISH kernel of grouped-query attention_bwd_k or _v that "
                       "sn_att_dkv_parts splits (a bug in the fuse pass)", k->name);
    if (k->stage != SN_SUM_WHOLE && n->op != SN_OP_ATTENTION_BWD_Q && !k->dkv_parts &&
        !(k->stage == SN_SUM_PARTIAL && n->op == SN_OP_ATTENTION_BWD_K) &&
        !(n->op == SN_OP_ATTENTION_CACHE && sn_split_parts(k) > 1))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: only the atomic dq's kernels (kernel.h: "
                       "attention_bwd_q's zero and store, attention_bwd_k's PARTIAL), dk and dv "
                       "in parts and a split attention_cache have a stage (a bug in the fuse "
                       "pass)", k->name);
    int n_out = a2 ? 2 : 1, n_into = k->n_access - n->n_in;
    if (n_into < 0)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an attention kernel has an access per "
                       "input of its anchor (%d) and maybe one per output, not %d (a bug in the "
                       "fuse pass)", k->name, n->n_in, k->n_access);
    /* outputs written through accesses: every backward output, or the forward's o alone */
    bool into = n_into > 0, fwd = n->op == SN_OP_ATTENTION || n->op == SN_OP_ATTENTION_LSE;
    if (into && n_into != (fwd ? 1 : n_out))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an attention kernel writes every backward "
                       "output, or the forward's o alone, through an access (a bug in the fuse "
                       "pass)", k->name);
    if (k->n_out != n_out || (!into && (k->args[0] != n || (a2 && k->args[1] != a2))) ||
        (into && fwd && a2 && k->args[1] != a2))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: outputs must be args[0] = %s%s (a bug in "
                       "the fuse pass)", k->name, sn_op_name(n->op), a2 ? ", args[1] = anchor2" : "");
    for (int o = 0; o < n_into; o++) {
        const sn_access *x = &k->access[n->n_in + o];
        const sn_node *y = o ? a2 : n;
        if (x->arg != o || x->masked || x->stride[y->rank - 1] != 1)
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: output %d is written through an access "
                           "to args[%d] with unit stride along its last axis (a bug in the fuse "
                           "pass)", k->name, o, o);
    }
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] == a2) continue; /* written by this kernel, not read */
        const sn_access *x = &k->access[i];
        if (x->arg < k->n_out || x->arg >= k->n_out + k->n_in || x->masked ||
            x->stride[n->in[i]->rank - 1] != 1)
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: input %%%d of %s must be read from an "
                           "input arg with unit stride along its last axis (a bug in the fuse "
                           "pass)", k->name, n->in[i]->id, sn_op_name(n->op));
    }
    const sn_node *q = n->in[0];
    int r = q->rank;
    bool kv_items = by_kv && !(k->dkv_parts && k->stage == SN_SUM_PARTIAL);
    int64_t slices = sn_shape_numel(r - 2, (kv_items ? n->in[1] : q)->shape);
    if (n->op == SN_OP_ATTENTION_CACHE && k->stage == SN_SUM_PARTIAL)
        slices *= sn_split_parts(k); /* and each slice's parts of the keys (kernel.h) */
    if (k->stage == SN_SUM_WHOLE && n->op != SN_OP_ATTENTION_CACHE) /* their chunks of rows */
        slices *= ((kv_items ? n->in[1] : q)->shape[r - 2] + SN_ATT_ROW_CHUNK - 1) / SN_ATT_ROW_CHUNK;
    if (k->n_items != slices)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: n_items is %lld, not the %lld (batch x "
                       "head) slices of %s (times their chunks of rows or parts: kernel.h; a bug "
                       "in the fuse pass)", k->name,
                       (long long)k->n_items, (long long)slices, kv_items ? "k" : "q");
    return SN_OK;
}

bool sn_kernel_att_tensor_cores(const sn_kernel *k, const sn_target *t) {
    const sn_node *n = k->anchor, *a2 = k->anchor2, *q = n->in[0];
    int r = q->rank;
    int64_t D = q->shape[r - 1], Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : D;
    bool ok = D % 16 == 0 && Dv % 16 == 0 &&
              ((q->dtype == SN_BF16 && t->mma_bf16) || (q->dtype == SN_F16 && t->mma_f16));
    /* 16-byte loads of 16-bit rows: every offset and stride a multiple of 8 elements */
    for (int i = 0; ok && i < n->n_in; i++) {
        if (n->in[i] == a2 || n->in[i]->rank < r) continue; /* written here, or lse (f32) */
        ok = k->access[i].offset % 8 == 0;
        for (int d = 0; ok && d + 1 < n->in[i]->rank; d++) ok = k->access[i].stride[d] % 8 == 0;
    }
    for (int i = n->n_in; ok && i < k->n_access; i++) { /* and the outputs' (pairs stored) */
        ok = k->access[i].offset % 8 == 0;
        for (int d = 0; ok && d + 1 < n->rank; d++) ok = k->access[i].stride[d] % 8 == 0;
    }
    return ok;
}

/* ---- the other kinds ---- */

/* A pointwise kernel: instructions pointwise ops or identities referring back only, accesses
 * reading input args, each output storing an instruction over the whole index space. */
static sn_status check_pointwise(const sn_kernel *k, sn_err *e) {
    if (k->n_instr < 1 || k->n_instr > SN_KER_MAX_INSTR || !k->instr || k->rank < 0 ||
        k->rank > SN_MAX_RANK || k->n_access > SN_KER_MAX_ARGS)
        return BUG("a pointwise kernel has 1 .. %d instructions and an index space of rank 0 .. %d",
                   SN_KER_MAX_INSTR, SN_MAX_RANK);
    for (int i = 0; i < k->n_instr; i++) {
        const sn_pw_instr *in = &k->instr[i];
        sn_op op = in->node->op;
        if (sn_op_kind(op) != SN_K_POINTWISE && !sn_pw_is_identity(op))
            return BUG("instruction %d is %s (%%%d), not a pointwise op", i, sn_op_name(op), in->node->id);
        if (sn_op_kind(op) == SN_K_POINTWISE && in->n_in != sn_op_min_inputs(op))
            return BUG("instruction %d (%s) has %d operands", i, sn_op_name(op), in->n_in);
        if (op == SN_OP_DROPOUT && sn_numel(in->node) != sn_shape_numel(k->rank, k->shape))
            return BUG("instruction %d, a dropout of %lld elements, in an index space of %lld: its "
                       "mask reads its own elements' indices", i, (long long)sn_numel(in->node),
                       (long long)sn_shape_numel(k->rank, k->shape));
        for (int j = 0; j < in->n_in; j++) {
            const sn_ref *r = &in->in[j];
            if ((r->kind == SN_REF_INSTR && (r->index < 0 || r->index >= i)) ||
                (r->kind == SN_REF_ACCESS && (r->index < 0 || r->index >= k->n_access)))
                return BUG("operand %d of instruction %d refers to no earlier instruction or access", j, i);
        }
    }
    for (int a = 0; a < k->n_access; a++)
        if (k->access[a].arg < k->n_out || k->access[a].arg >= k->n_out + k->n_in)
            return BUG("access %d reads args[%d], not an input", a, k->access[a].arg);
    for (int o = 0; o < k->n_out; o++)
        if (k->store[o] < 0 || k->store[o] >= k->n_instr ||
            sn_numel(k->args[o]) != sn_shape_numel(k->rank, k->shape))
            return BUG("output %d stores no instruction over the kernel's index space", o);
    return SN_OK;
}

/* Whether x is one of k's input args. */
static bool reads(const sn_kernel *k, const sn_node *x) {
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i] == x) return true;
    return false;
}

static sn_status check_reduce(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    if (n->op != SN_OP_SUM && n->op != SN_OP_MEAN && n->op != SN_OP_MAX && n->op != SN_OP_AMAX)
        return BUG("%s is not a reduction (sum, mean, max, amax)", sn_op_name(n->op));
    if (n->a.axis < 0 || n->a.axis >= n->in[0]->rank || !reads(k, n->in[0]))
        return BUG("a reduction reads its input arg over an axis of it");
    return SN_OK;
}

static sn_status check_gather(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    bool fwd = n->op == SN_OP_EMBEDDING;
    if (!fwd && n->op != SN_OP_EMBEDDING_BWD)
        return BUG("%s is not a gather (embedding, embedding_bwd)", sn_op_name(n->op));
    if (n->n_in < 2) return BUG("a gather needs (table, ids) or (ids, dy)");
    const sn_node *ids = n->in[fwd ? 1 : 0];
    if (ids->dtype != SN_I32) /* the IR's rule, which the generators rely on */
        return BUG("ids %%%d are %s, not i32", ids->id, sn_dtype_name(ids->dtype));
    if (fwd && k->stage != SN_SUM_WHOLE) return BUG("embedding runs as one kernel");
    return SN_OK;
}

/* An NF4 weight unpacked (ir/nf4.h): args (y; packed). */
static sn_status check_dequant(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    if (n->op != SN_OP_DEQUANT_NF4 || k->n_out != 1 || k->n_in != 1 || k->args[1] != n->in[0])
        return BUG("a dequantize kernel unpacks a dequant_nf4's packed input into its one output");
    return SN_OK;
}

/* The few-row product (kernel.h): the matmul's x and its weight's source in, the matmul out;
 * few rows, x not transposed, a (K, N) or (tb) (N, K) weight that is a dequant_nf4 (f32, bf16
 * or f16 operands) or an f32 cast of a bf16 or f16 value (f32 x). */
static sn_status check_gemv(const sn_kernel *k, sn_err *e) {
    const sn_node *mm = k->anchor, *x = mm->in[0], *w = mm->in[1];
    bool nf4 = w->op == SN_OP_DEQUANT_NF4;
    if ((!nf4 && w->op != SN_OP_CAST) || k->n_out != 1 || k->n_in != 2 || k->args[0] != mm ||
        k->args[1] != x || k->args[2] != w->in[0])
        return BUG("a few-row product writes its matmul from the matmul's x and the source of its "
                   "weight, a dequant_nf4's packed bytes or a cast's 16-bit value (args y, x, "
                   "source)");
    if (!nf4 && (w->dtype != SN_F32 || (w->in[0]->dtype != SN_BF16 && w->in[0]->dtype != SN_F16) ||
                 w->in[0]->rank != 2))
        return BUG("a few-row product's cast weight widens a bf16 or f16 matrix to f32 (not %s to "
                   "%s)", sn_dtype_name(w->in[0]->dtype), sn_dtype_name(w->dtype));
    int64_t K = w->rank == 2 ? w->shape[mm->a.tb ? 1 : 0] : -1;
    if (mm->a.ta || w->rank != 2 || x->shape[x->rank - 1] != K)
        return BUG("a few-row product multiplies x (.., K) by a (K, N) weight, or a transposed "
                   "(N, K) one, x not transposed");
    int64_t M = sn_numel(x) / K;
    if (M > SN_GEMV_MAX_M)
        return BUG("a few-row product has at most %d rows, not %lld", SN_GEMV_MAX_M, (long long)M);
    if ((x->dtype != SN_F32 && (!nf4 || (x->dtype != SN_BF16 && x->dtype != SN_F16))) ||
        mm->dtype != SN_F32)
        return BUG("a few-row product reads f32 x (bf16 or f16 with an NF4 weight; not %s) and "
                   "writes f32 (not %s)", sn_dtype_name(x->dtype), sn_dtype_name(mm->dtype));
    if (k->stage != SN_SUM_WHOLE && (k->stage > SN_SUM_FINISH || sn_split_parts(k) < 2))
        return BUG("a few-row product runs as one kernel, or as the PARTIAL and FINISH of a split "
                   "of its k where the rule (kernel_split.c) makes parts");
    return SN_OK;
}

/* The thin product (kernel.h): a GEMM's args (y, x, W) with no epilogue, of a matmul whose
 * shape and dtypes fit (sn_thin_shape_fits). */
static sn_status check_thin(const sn_kernel *k, sn_err *e) {
    const sn_node *mm = k->anchor, *y = k->args[0];
    if (k->stage == SN_SUM_FINISH ? k->n_out != 1 || k->n_in != 0
                                  : k->n_out != 1 || k->n_in != 2 || k->args[1] != mm->in[0] ||
                                        k->args[2] != mm->in[1])
        return BUG("a thin product writes its matmul from the matmul's x and W (args y, x, W; a "
                   "thin sum's FINISH: y alone)");
    if (y != mm && (y->op != SN_OP_CAST || y->in[0] != mm || y->dtype != mm->in[0]->dtype))
        return BUG("a thin product stores its f32 matmul or the matmul's cast to x's dtype");
    if (!sn_thin_shape_fits(mm))
        return BUG("a thin product multiplies x (M, K) by W (K, N) or W^T, x not transposed (or "
                   "x^T W of x (M, K), W (M, N): the sum form), x and W of one dtype (f32, bf16, "
                   "f16), N or K at most %d, the other a multiple of a lane's share, at most %d "
                   "warps of them, at least %d rows", SN_THIN_MAX, SN_THIN_MAX_WARPS, SN_THIN_MIN_M);
    sn_thin t = sn_thin_of(k);
    if (t.sum && (y != mm || (k->stage != SN_SUM_PARTIAL && k->stage != SN_SUM_FINISH)))
        return BUG("a thin product's sum form stores the f32 matmul, as a PARTIAL kernel over its "
                   "rows' parts and a FINISH adding them");
    if (!t.sum && k->stage != SN_SUM_WHOLE) return BUG("a thin product runs as one kernel");
    return SN_OK;
}

/* The optimizer kinds (made by the trainer): their flat range and 16-bit copies. */
static sn_status check_optim(const sn_kernel *k, sn_err *e) {
    if (k->opt.flat_low != SN_F32 && (k->kind != SN_KER_ADAMW || (k->opt.flat_low != SN_BF16 && k->opt.flat_low != SN_F16)))
        return BUG("16-bit copies (%s) are written by AdamW only, in bf16 or f16",
                   sn_dtype_name(k->opt.flat_low));
    if (k->opt.flat_n < 1 || k->opt.flat_decay < 0 || k->opt.flat_decay > k->opt.flat_n)
        return BUG("the flat range is [0, %lld) with %lld decayed elements: flat_n >= 1 and 0 <= "
                   "flat_decay <= flat_n", (long long)k->opt.flat_n, (long long)k->opt.flat_decay);
    return SN_OK;
}

/* The work split (sn_kernel_work); embedding_bwd's one-kernel version (the CPU's) takes any
 * number of column blocks. */
static sn_status check_work(const sn_kernel *k, sn_err *e) {
    const sn_node *a = k->anchor;
    if (k->kind == SN_KER_GATHER && a->op == SN_OP_EMBEDDING_BWD && k->stage == SN_SUM_WHOLE) {
        int64_t C = a->shape[a->rank - 1];
        if (k->n_items >= 1 && k->n_items <= C) return SN_OK;
        return BUG("embedding_bwd splits its %lld columns into n_items blocks, so n_items must be "
                   "in [1, %lld], not %lld", (long long)C, (long long)C, (long long)k->n_items);
    }
    int64_t want;
    bool serial;
    sn_kernel_work(k, &want, &serial);
    if (k->n_items != want)
        return BUG("n_items is %lld, not the %lld items of its work split (sn_kernel_work)",
                   (long long)k->n_items, (long long)want);
    if (serial && !k->serial)
        return BUG("%s sums over all rows into one output, so the kernel must be marked serial "
                   "(one call over [0, n_items))", a ? sn_op_name(a->op) : sn_kernel_kind_name(k->kind));
    return SN_OK;
}

/* Whether k's anchor is of its kind's ops (a pointwise kernel: its index space's rank in range),
 * so that its work split can be worked out. */
static bool anchor_fits(const sn_kernel *k) {
    const sn_node *a = k->anchor;
    switch (k->kind) {
    case SN_KER_POINTWISE: return k->rank >= 0 && k->rank <= SN_MAX_RANK;
    case SN_KER_ROW: return sn_row_facts_of(a->op) != NULL;
    case SN_KER_REDUCE: return sn_op_kind(a->op) == SN_K_REDUCE;
    case SN_KER_GEMM: return a->op == SN_OP_MATMUL;
    case SN_KER_GATHER: return a->op == SN_OP_EMBEDDING || a->op == SN_OP_EMBEDDING_BWD;
    case SN_KER_DEQUANT: return a->op == SN_OP_DEQUANT_NF4;
    case SN_KER_GEMV:
        return a->op == SN_OP_MATMUL &&
               (a->in[1]->op == SN_OP_DEQUANT_NF4 || a->in[1]->op == SN_OP_CAST);
    case SN_KER_THIN: return a->op == SN_OP_MATMUL;
    default: return false;
    }
}

/* A joined FINISH (kernel.h: tail): a norm weight gradient's FINISH in a norm backward pair's
 * launch, or a thin sum's in a thin product's, their buffers within one launch's, neither
 * touching the other's sums and the host not writing the FINISH's scratch. */
static sn_status check_tail(const sn_kernel *k, sn_err *e) {
    const sn_kernel *f = k->tail;
    bool norm = k->kind == SN_KER_ROW && k->row.pair && f->kind == SN_KER_ROW && f->anchor &&
                (f->anchor->op == SN_OP_LAYERNORM_BWD_W || f->anchor->op == SN_OP_RMSNORM_BWD_W);
    bool thin = k->kind == SN_KER_THIN && k->stage != SN_SUM_FINISH && f->kind == SN_KER_THIN;
    if (!(norm || thin) || f->stage != SN_SUM_FINISH || f->anchor2 || f->tail)
        return BUG("only a norm backward pair carries a joined FINISH, a norm weight gradient's, "
                   "and only a thin product a thin sum's");
    if (sn_kernel_n_bufs(k) > SN_KER_MAX_BUFS)
        return BUG("with its joined FINISH %s it passes %d buffers (at most %d)", f->name,
                   sn_kernel_n_bufs(k), SN_KER_MAX_BUFS);
    if (f->scratch == k->scratch)
        return BUG("it writes the scratch its joined FINISH %s reads", f->name);
    for (int a = 0; a < k->n_out + k->n_in; a++)
        for (int o = 0; o < f->n_out; o++)
            if (k->args[a] == f->args[o])
                return BUG("it touches %%%d, a sum of its joined FINISH %s", f->args[o]->id, f->name);
    return sn_kernel_check(f, e);
}

sn_status sn_kernel_check(const sn_kernel *k, sn_err *e) {
    if ((unsigned)k->kind >= SN_KER_KIND_COUNT) return BUG("kind %d is no kernel kind", (int)k->kind);
    sn_status st0;
    if (k->tail && (st0 = check_tail(k, e))) return st0;
    bool optim = k->kind == SN_KER_GRAD_ACC || k->kind == SN_KER_SQNORM || k->kind == SN_KER_CLIP ||
                 k->kind == SN_KER_ADAMW;
    sn_status st;
    if (optim) return (st = check_optim(k, e)) ? st : check_work(k, e);
    if (k->n_out < 1 || k->n_in < 0 || k->n_out + k->n_in > SN_KER_MAX_ARGS)
        return BUG("%d outputs and %d inputs (1 .. %d args)", k->n_out, k->n_in, SN_KER_MAX_ARGS);
    for (int i = 0; i < k->n_out + k->n_in; i++)
        if (!k->args[i]) return BUG("args[%d] is no node", i);
    if (k->kind == SN_KER_ATTENTION) /* its anchors first, its work split there too */
        return sn_kernel_check_attention(k, e);
    if (k->kind != SN_KER_POINTWISE && !k->anchor)
        return BUG("a %s kernel without its anchor", sn_kernel_kind_name(k->kind));
    if (!anchor_fits(k))
        return k->anchor ? BUG("its anchor is %s, no op of a %s kernel", sn_op_name(k->anchor->op),
                               sn_kernel_kind_name(k->kind))
                         : BUG("its index space has rank %d", k->rank);
    if ((st = check_work(k, e))) return st;
    switch (k->kind) {
    case SN_KER_POINTWISE: return check_pointwise(k, e);
    case SN_KER_ROW: {
        sn_row_plan p;
        return sn_kernel_row_plan(k, &p, e);
    }
    case SN_KER_REDUCE: return check_reduce(k, e);
    case SN_KER_GEMM: return sn_kernel_check_gemm(k, e);
    case SN_KER_GATHER: return check_gather(k, e);
    case SN_KER_DEQUANT: return check_dequant(k, e);
    case SN_KER_GEMV: return check_gemv(k, e);
    case SN_KER_THIN: return check_thin(k, e);
    default: break;
    }
    SN_ASSERT(!"a kernel kind without its check");
    return SN_ERR_INTERNAL;
}

sn_status sn_program_check(const sn_program *p, sn_err *e) {
    sn_status st = SN_OK;
    if (p->n_shadows && p->shadows != p->kernels + p->n_kernels) /* compiled as one array */
        return sn_fail(e, SN_ERR_INTERNAL, "the weight shadows' %d kernels are not right after the "
                       "step's %d in one array (program.h): a pass moved one and not the other",
                       p->n_shadows, p->n_kernels);
    for (int i = 0; i < p->n_kernels + p->n_shadows && !st; i++) {
        const sn_kernel *k = i < p->n_kernels ? p->kernels[i] : p->shadows[i - p->n_kernels];
        st = sn_kernel_check(k, e);
        for (const sn_kernel *q = k; !st && q; q = q->tail) /* a joined FINISH's too */
            if (q->stage != SN_SUM_WHOLE && (q->scratch < 0 || q->scratch >= p->n_values))
                st = BUG("its scratch value %d is none of the program's %d", q->scratch, p->n_values);
    }
    return st;
}
