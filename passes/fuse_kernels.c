/* fuse_kernels.c: the kernels (sn_kernel) and values (sn_value) built from fuse's decisions.
 * Convention: a fused kernel is built from its root down: add_value computes a value in the
 * kernel when the kernel is its home, else reads its buffer through an access. */
#include <stdlib.h>
#include <string.h>

#include "fuse_int.h"

/* ---- kernels ---- */

/* The failure of b's kernel running out of args or instructions; the driver may build it again
 * with fewer values joined (s->overflowed names it). */
sn_status sn_fuse_too_many(fuse_state *s, pw_build *b) {
    s->overflowed = b->G;
    return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: the kernel of node %%%d (%s) would read and "
                   "write more than %d buffers or compute more than %d instructions; splitting "
                   "such chains is not supported yet", b->root->id, sn_op_name(b->root->op),
                   SN_KER_MAX_ARGS, MAX_INSTR);
}

static sn_status add_value(fuse_state *s, pw_build *b, const sn_node *x, sn_ref *ref);

/* Appends the instructions computing n (its operands first); returns its index or -1. */
static int add_instr(fuse_state *s, pw_build *b, const sn_node *n) {
    sn_pw_instr in = {.node = n, .n_in = n->n_in};
    if (n->n_in > 3) {
        sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: node %%%d (%s) has %d inputs; compiled pointwise "
                "kernels take at most 3 (concat of more parts is not supported yet)",
                n->id, sn_op_name(n->op), n->n_in);
        return -1;
    }
    bool row = is_row(n->op);
    for (int i = 0; i < n->n_in; i++) {
        sn_status st;
        if (n->op == SN_OP_CONCAT) st = sn_fuse_concat_part(s, b, n, i, &in.in[i]);
        else if (row && !sn_row_operand_per_element(n->op, i))
            st = sn_fuse_row_operand_access(s, b, n, i, &in.in[i]);
        else st = add_value(s, b, n->in[i], &in.in[i]);
        if (st) return -1;
    }
    if (b->n_instr == MAX_INSTR) {
        sn_fuse_too_many(s, b);
        return -1;
    }
    if (row) b->row_instr = b->n_instr;
    b->instr[b->n_instr] = in;
    return b->n_instr++;
}

/* A reference to x's value in the kernel: its instruction when the kernel computes it (stored
 * too when x has a buffer), a constant for a folded FULL, else an access to x's buffer (through
 * the views folded over it). */
static sn_status add_value(fuse_state *s, pw_build *b, const sn_node *x, sn_ref *ref) {
    if (!s->mat[x->id] && x->op == SN_OP_FULL) {
        *ref = (sn_ref){.kind = SN_REF_CONST, .value = x->a.f};
        return SN_OK;
    }
    if (s->home[x->id] == b->G && !is_view(x->op)) {
        for (int i = 0; i < b->n_instr; i++)
            if (b->instr[i].node == x) {
                *ref = (sn_ref){.kind = SN_REF_INSTR, .index = i};
                return SN_OK;
            }
        int i = add_instr(s, b, x);
        if (i < 0) return s->e->code;
        if (s->mat[x->id]) {
            if (b->n_in + b->n_out == SN_KER_MAX_ARGS) return sn_fuse_too_many(s, b);
            b->out[b->n_out] = x;
            b->out_instr[b->n_out++] = i;
        }
        *ref = (sn_ref){.kind = SN_REF_INSTR, .index = i};
        return SN_OK;
    }
    view_map m;
    if (!sn_fuse_map_of(s, x, &m)) return sn_fuse_not_strided(s, x);
    return sn_fuse_push_access(s, b, x, &m, ref);
}

static sn_kernel *new_kernel(fuse_state *s, sn_kernel_kind kind, const sn_node *out) {
    sn_program *p = s->p;
    sn_kernel *k = sn_arena_alloc(&p->arena, sizeof *k);
    if (!k) {
        sn_fail_oom(s->e, sizeof *k, "a kernel of the fuse pass");
        return NULL;
    }
    k->kind = kind;
    k->id = p->n_kernels;
    k->n_out = 1;
    k->args[0] = out;
    snprintf(k->name, sizeof k->name, "k%d_%s", k->id, sn_op_name(out->op));
    p->kernels[p->n_kernels++] = k;
    return k;
}

/* The kernel of b: outputs (the root first), then inputs; accesses renumbered to args. */
static sn_status finish(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *anchor) {
    sn_arena *A = &s->p->arena;
    int o = 0;
    for (int i = 0; i < b->n_out; i++) /* the root first */
        if (b->out[i] == b->root) {
            k->args[o] = b->out[i];
            k->store[o++] = b->out_instr[i];
        }
    SN_ASSERT(o == 1);
    for (int i = 0; i < b->n_out; i++)
        if (b->out[i] != b->root) {
            k->args[o] = b->out[i];
            k->store[o++] = b->out_instr[i];
        }
    k->n_out = b->n_out;
    k->n_in = b->n_in;
    for (int i = 0; i < b->n_in; i++) k->args[b->n_out + i] = b->in[i];
    for (int a = 0; a < b->n_access; a++) b->access[a].arg += b->n_out;
    k->rank = b->rank;
    memcpy(k->shape, b->shape, sizeof k->shape);
    k->n_instr = b->n_instr;
    k->instr = sn_arena_alloc(A, sizeof(sn_pw_instr) * (size_t)b->n_instr);
    k->n_access = b->n_access;
    k->access = sn_arena_alloc(A, sizeof(sn_access) * (size_t)(b->n_access + 1));
    if (!k->instr || !k->access) return sn_fail_oom(s->e, sizeof(sn_pw_instr) * (size_t)b->n_instr, "a kernel of the fuse pass");
    memcpy(k->instr, b->instr, sizeof(sn_pw_instr) * (size_t)b->n_instr);
    memcpy(k->access, b->access, sizeof(sn_access) * (size_t)b->n_access);
    /* named after its ops: a row kernel's row op first, then the others in order; a pointwise
     * kernel's root, then the others most recent first */
    size_t len = (size_t)snprintf(k->name, sizeof k->name, "k%d_%s", k->id,
                                  sn_op_name((anchor ? anchor : b->root)->op));
    for (int t = 0; t < b->n_instr && len + 12 < sizeof k->name; t++) {
        int i = anchor ? t : b->n_instr - 1 - t;
        const sn_node *n = b->instr[i].node;
        if (n == anchor || (!anchor && n == b->root)) continue;
        len += (size_t)snprintf(k->name + len, sizeof k->name - len, "_%s", sn_op_name(n->op));
    }
    if (anchor) {
        k->anchor = anchor;
        k->row.instr = b->row_instr;
    }
    sn_kernel_work(k, &k->n_items, &k->serial);
    return SN_OK;
}

static pw_build *new_build(fuse_state *s, const sn_node *root, const sn_node *space) {
    pw_build *b = sn_calloc(1, sizeof *b, "a kernel of the fuse pass", s->e);
    if (!b) return NULL;
    b->G = root->id;
    b->root = root;
    b->rank = space->rank;
    memcpy(b->shape, space->shape, sizeof b->shape);
    b->row_instr = -1;
    return b;
}

/* The column sums that joined the row kernel k of row op n (fuse.c colsum_host), as its
 * outputs 1 .. n_colsum (kernel.h): k has one output so far, the row op's; inputs it already
 * has move up, with the accesses that read them. */
static void add_colsums(fuse_state *s, sn_kernel *k, const sn_node *n) {
    int c = 0;
    for (int j = 0; j < s->g->n_nodes; j++)
        c += j != n->id && s->home[j] == n->id && s->g->nodes[j]->op == SN_OP_SUM;
    if (!c) return;
    SN_ASSERT(k->n_out == 1 && k->n_out + k->n_in + 2 * c <= SN_KER_MAX_ARGS);
    for (int i = k->n_out + k->n_in - 1; i >= k->n_out; i--) k->args[i + c] = k->args[i];
    for (int a = 0; a < k->n_access; a++)
        if (k->access[a].arg >= k->n_out) k->access[a].arg += c;
    for (int j = 0; j < s->g->n_nodes; j++) {
        const sn_node *x = s->g->nodes[j];
        if (j == n->id || s->home[j] != n->id || x->op != SN_OP_SUM) continue;
        k->store[k->n_out] = k->n_instr ? k->row.instr : 0; /* a sum: FINISH stores it */
        k->args[k->n_out++] = x;
        k->row.n_colsum++;
        size_t len = strlen(k->name);
        if (len + 5 < sizeof k->name) snprintf(k->name + len, sizeof k->name - len, "_sum");
    }
}

/* The operands of k's column sums, read as inputs (after those k has). */
static void colsum_operands(fuse_state *s, sn_kernel *k) {
    for (int o = 1; o <= k->row.n_colsum; o++) {
        const sn_node *x = k->args[o], *src = s->read_as[x->id] ? s->read_as[x->id] : x->in[0];
        SN_ASSERT(s->mat[src->id]);
        int at = -1;
        for (int j = k->n_out; j < k->n_out + k->n_in && at < 0; j++)
            if (k->args[j] == src) at = j;
        if (at < 0) {
            at = k->n_out + k->n_in++;
            k->args[at] = src;
        }
        k->row.colsum_src[o] = at;
    }
}

/* The kernel rooted at `root`: a pointwise group, or a row op with its prologue and epilogue. */
sn_status sn_fuse_group_kernel(fuse_state *s, const sn_node *root) {
    const sn_node *anchor = s->anchor[root->id];
    sn_kernel *k = new_kernel(s, anchor ? SN_KER_ROW : SN_KER_POINTWISE, root);
    pw_build *b = k ? new_build(s, root, s->space[root->id]) : NULL;
    if (!b) return SN_ERR_OOM;
    sn_ref top;
    sn_status st = add_value(s, b, root, &top);
    for (int j = root->id + 1; !st && j < s->g->n_nodes; j++) /* casts after it (fuse.c); not */
        if (s->home[j] == root->id && s->live[j] && s->g->nodes[j]->op != SN_OP_SUM) /* the */
            st = add_value(s, b, s->g->nodes[j], &top); /* column sums (add_colsums) */
    if (!st) st = finish(s, k, b, anchor);
    if (!st && anchor && is_row(anchor->op)) { /* a norm weight gradient widening its dy */
        add_colsums(s, k, anchor);
        colsum_operands(s, k);
        sn_kernel_work(k, &k->n_items, &k->serial);
    }
    free(b);
    return st;
}

/* A view with a buffer of its own: a copy of what it views. */
sn_status sn_fuse_copy_kernel(fuse_state *s, const sn_node *v) {
    sn_kernel *k = new_kernel(s, SN_KER_POINTWISE, v);
    pw_build *b = k ? new_build(s, v, v) : NULL;
    if (!b) return SN_ERR_OOM;
    sn_pw_instr copy = {.node = v, .n_in = 1};
    view_map m;
    sn_status st = sn_fuse_map_through(s, v, &m) ? sn_fuse_push_access(s, b, v, &m, &copy.in[0])
                                                 : sn_fuse_not_strided(s, v);
    if (!st) {
        b->instr[b->n_instr++] = copy;
        b->out[0] = v;
        b->n_out = 1;
        st = finish(s, k, b, NULL);
    }
    free(b);
    return st;
}

static sn_kernel_kind compute_kind(sn_op op) {
    switch (sn_op_kind(op)) {
    case SN_K_ROW: return SN_KER_ROW;
    case SN_K_REDUCE: return SN_KER_REDUCE;
    case SN_K_MATMUL: return SN_KER_GEMM;
    case SN_K_GATHER: return SN_KER_GATHER;
    case SN_K_DEQUANT: return SN_KER_DEQUANT;
    default: return SN_KER_ATTENTION;
    }
}

/* A kernel of one compute node (a row op with nothing fused reads its inputs as args). */
sn_status sn_fuse_compute_kernel(fuse_state *s, const sn_node *n) {
    bool gemv = sn_fuse_is_gemv(s, n); /* reads its weight's source (kernel.h) */
    sn_kernel *k = new_kernel(s, gemv ? SN_KER_GEMV : compute_kind(n->op), n);
    if (!k) return SN_ERR_OOM;
    k->anchor = n;
    if (gemv) snprintf(k->name, sizeof k->name, "k%d_%s", k->id, sn_gemv_name(k));
    const sn_node *lse = n->op == SN_OP_ATTENTION ? n->in[3] : NULL;
    if (lse && s->home[lse->id] == n->id) {
        k->anchor2 = lse;
        k->args[k->n_out++] = lse;
        snprintf(k->name, sizeof k->name, "k%d_attention_fwd", k->id);
    }
    for (int u = 0; n->op == SN_OP_ATTENTION_BWD_K && u < s->n_users[n->in[0]->id]; u++) {
        const sn_node *dv = s->g->nodes[s->users[n->in[0]->id][u]];
        if (dv->op != SN_OP_ATTENTION_BWD_V || s->home[dv->id] != n->id || k->anchor2) continue;
        k->anchor2 = dv; /* dk and dv in one pass */
        k->args[k->n_out++] = dv;
        snprintf(k->name, sizeof k->name, "k%d_attention_bwd_kv", k->id);
    }
    if (k->kind == SN_KER_ROW) add_colsums(s, k, n);
    bool att = k->kind == SN_KER_ATTENTION;
    bool into = att && s->into[n->id];
    /* outputs written through accesses: dq, or dk and dv, into a concatenation; the forward's
       o (not lse) into its permute */
    int n_into = !into ? 0 : n->op == SN_OP_ATTENTION ? 1 : k->n_out;
    if (att) { /* an access per input: attention reads q, k, v, o, dout through views; and
                  one per output written through one */
        k->n_access = n->n_in + n_into;
        k->access = sn_arena_alloc(&s->p->arena, sizeof(sn_access) * (size_t)k->n_access);
        if (!k->access) return sn_fail_oom(s->e, sizeof(sn_access) * 8, "a kernel of the fuse pass");
    }
    for (int o = 0; o < n_into; o++) {
        const sn_node *a = k->args[o], *y = s->into[a->id];
        view_map m;
        if (n->op == SN_OP_ATTENTION) SN_ASSERT(sn_fuse_map_of(s, a, &m) && m.base == y);
        else SN_ASSERT(y && sn_fuse_out_map(s, a, y, &m)); /* decide made sure */
        k->args[o] = y;
        k->access[n->n_in + o] = (sn_access){.arg = o, .offset = m.offset};
        memcpy(k->access[n->n_in + o].stride, m.stride, sizeof m.stride);
    }
    for (int i = 0; i < n->n_in; i++) {
        view_map m = {.base = gemv && i == 1 ? n->in[1]->in[0] : n->in[i]};
        bool gemm = k->kind == SN_KER_GEMM;
        if (att) {
            bool mapped = sn_fuse_map_of(s, n->in[i], &m);
            SN_ASSERT(mapped && !m.masked); /* decide made sure */
        } else if (gemm && !s->mat[m.base->id]) { /* read in place (kernel.h: operand views) */
            bool view = sn_gemm_operand_view(n, i, &m.base, &k->gemm.view[i]);
            SN_ASSERT(view && s->mat[m.base->id]); /* decide made sure */
        } else {
            SN_ASSERT(s->mat[m.base->id]);
        }
        int at = -1; /* a GEMM's A and B are two args, whatever they read */
        for (int j = 0; j < k->n_out + k->n_in && at < 0 && !gemm; j++)
            if (k->args[j] == m.base) at = j;
        if (at < 0) { /* compute ops have at most 6 inputs */
            at = k->n_out + k->n_in++;
            k->args[at] = m.base;
        }
        if (att) {
            k->access[i] = (sn_access){.arg = at, .offset = m.offset};
            memcpy(k->access[i].stride, m.stride, sizeof m.stride);
        }
    }
    if (k->kind == SN_KER_GEMM) sn_fuse_gemm_args(s, k); /* its epilogue (fuse_epilogue.c) */
    if (k->kind == SN_KER_ROW) colsum_operands(s, k); /* (the union's other parts are not row's) */
    sn_kernel_work(k, &k->n_items, &k->serial);
    return SN_OK;
}

/* A scratch value of `bytes` (program.h: no node) at the end of p's values: its index. The room
 * for it was counted by sn_fuse_make_values, op by op. */
static int new_scratch(fuse_state *s, int64_t bytes) {
    sn_program *p = s->p;
    SN_ASSERT(p->n_values < s->values_room); /* a two-stage op not counted there */
    p->values[p->n_values] = (sn_value){.bytes = bytes, .alias = -1, .first = -1, .last = -1};
    return p->n_values++;
}

/* The kernel k of a row op that sums over every row (a norm weight gradient, cross-entropy's
 * mean loss) becomes the PARTIAL kernel of kernel.h's two stages, followed by the FINISH kernel that sums the partials into k's sums; the partials are a
 * scratch value without a node (program.h), live from one to the other. */
sn_status sn_fuse_split_sum(fuse_state *s, sn_kernel *k) {
    int y = -1; /* the arg the row op's sum is stored into */
    for (int o = 0; o < k->n_out && y < 0; o++)
        if (k->n_instr == 0 ? o == 0 : k->store[o] == k->row.instr) y = o;
    SN_ASSERT(y >= 0 && (k->row.n_colsum == 0 || y == 0));
    if (k->n_out + k->n_in + 1 > SN_KER_MAX_ARGS)
        return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: kernel %s reads and writes %d buffers and "
                       "its partial sums would make one more than %d; not supported yet", k->name,
                       k->n_out + k->n_in, SN_KER_MAX_ARGS);
    k->stage = SN_SUM_PARTIAL;
    SN_ASSERT(k->args[y] == k->anchor);
    k->scratch = new_scratch(s, sn_kernel_scratch_bytes(k));
    sn_kernel_work(k, &k->n_items, &k->serial);
    sn_kernel *f = new_kernel(s, SN_KER_ROW, k->anchor);
    if (!f) return SN_ERR_OOM;
    sn_sum_finish_fill(k, f);
    return SN_OK;
}

sn_status sn_fuse_classifier(fuse_state *s, sn_kernel *k, const sn_node *loss) {
    SN_ASSERT(k->stage == SN_SUM_WHOLE && k->anchor->op == SN_OP_CROSS_ENTROPY_BWD && !k->anchor2);
    if (k->n_out + k->n_in + 1 > SN_KER_MAX_ARGS)
        return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: kernel %s reads and writes %d buffers and "
                       "its partial sums would make one more than %d; not supported yet", k->name,
                       k->n_out + k->n_in, SN_KER_MAX_ARGS);
    k->anchor2 = loss;
    k->stage = SN_SUM_PARTIAL;
    const char *op = strstr(k->name, "cross_entropy_bwd");
    char rest[40]; /* the epilogue's ops, named after the row op */
    snprintf(rest, sizeof rest, "%s", op ? op + strlen("cross_entropy_bwd") : "");
    snprintf(k->name, sizeof k->name, "k%d_classifier%s", k->id, rest);
    k->scratch = new_scratch(s, sn_sum_chunks(k) * sn_sum_width(k) * 4);
    sn_kernel_work(k, &k->n_items, &k->serial);
    sn_kernel *f = new_kernel(s, SN_KER_ROW, loss);
    if (!f) return SN_ERR_OOM;
    sn_sum_finish_fill(k, f);
    return SN_OK;
}

/* The kernel k of embedding_bwd becomes its BUCKET kernel (kernel.h), reading the ids alone,
 * followed by its ROWS kernel, with their scratch value. */
sn_status sn_fuse_split_gather(fuse_state *s, sn_kernel *k) {
    const sn_node *n = k->anchor;
    SN_ASSERT(k->kind == SN_KER_GATHER && n->op == SN_OP_EMBEDDING_BWD && k->n_out == 1 &&
              k->args[0] == n);
    sn_kernel *f = new_kernel(s, SN_KER_GATHER, n);
    if (!f) return SN_ERR_OOM;
    f->anchor = n;
    f->n_in = k->n_in;
    memcpy(f->args + 1, k->args + 1, sizeof *k->args * (size_t)k->n_in);
    f->stage = SN_GATHER_ROWS;
    snprintf(f->name, sizeof f->name, "k%d_embedding_bwd_rows", f->id);
    k->stage = SN_GATHER_BUCKET;
    k->n_in = 1;
    k->args[1] = n->in[0]; /* the ids */
    size_t len = strlen(k->name);
    if (len + 8 < sizeof k->name) snprintf(k->name + len, sizeof k->name - len, "_bucket");
    f->scratch = k->scratch = new_scratch(s, sn_kernel_scratch_bytes(k));
    sn_kernel_work(k, &k->n_items, &k->serial);
    sn_kernel_work(f, &f->n_items, &f->serial);
    return SN_OK;
}

/* k (stage WHOLE) becomes a PARTIAL kernel named with `suffix`, and its FINISH kernel, the new
 * last kernel of p, a copy of it (its args and accesses, the arena's, shared: it reads only the
 * scratch), with their scratch value: kernel.h's two stages of a kernel that keeps its args.
 * NULL when out of memory. */
static sn_kernel *split_in_two(fuse_state *s, sn_kernel *k, const char *suffix) {
    sn_kernel *f = new_kernel(s, k->kind, k->anchor);
    if (!f) return NULL;
    int id = f->id;
    *f = *k;
    f->id = id;
    f->stage = SN_SUM_FINISH;
    k->stage = SN_SUM_PARTIAL;
    size_t len = strlen(k->name);
    if (len + strlen(suffix) < sizeof k->name) snprintf(k->name + len, sizeof k->name - len, "%s", suffix);
    f->scratch = k->scratch = new_scratch(s, sn_kernel_scratch_bytes(k));
    sn_kernel_work(k, &k->n_items, &k->serial);
    sn_kernel_work(f, &f->n_items, &f->serial);
    return f;
}

sn_status sn_fuse_split_decode(fuse_state *s, sn_kernel *k) {
    SN_ASSERT(k->stage == SN_SUM_WHOLE && sn_split_parts(k) > 1);
    SN_ASSERT(k->kind != SN_KER_THIN || k->n_out + k->n_in + 1 <= SN_KER_MAX_ARGS);
    if (k->n_out + k->n_in + 1 > SN_KER_MAX_ARGS) return SN_OK; /* stays one kernel */
    sn_kernel *f = split_in_two(s, k, "_partial");
    if (!f) return SN_ERR_OOM;
    snprintf(f->name, sizeof f->name, "k%d_%s_finish", f->id,
             k->kind == SN_KER_GEMV ? sn_gemv_name(k)
             : k->kind == SN_KER_THIN ? "thin_sum" : sn_op_name(k->anchor->op));
    if (k->kind == SN_KER_THIN) f->n_in = 0; /* its sums alone (kernel.h): joinable */
    return SN_OK;
}

/* Whether dq kernel q's anchor and dk/dv kernel kv's read the same six inputs through the same
 * accesses, with the same scale. */
static bool same_att_inputs(const sn_kernel *q, const sn_kernel *kv) {
    const sn_node *a = q->anchor, *b = kv->anchor;
    if (a->a.f != b->a.f || a->n_in != b->n_in) return false;
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] != b->in[i]) return false;
    return true;
}

sn_status sn_fuse_att_dq_atomic(fuse_state *s) {
    sn_program *p = s->p;
    for (int j = 0; j < p->n_kernels; j++) {
        sn_kernel *kv = p->kernels[j];
        if (kv->kind != SN_KER_ATTENTION || kv->anchor->op != SN_OP_ATTENTION_BWD_K ||
            kv->stage != SN_SUM_WHOLE || !sn_kernel_att_tensor_cores(kv, s->t))
            continue; /* the atomic dq is the tensor-core dk/dv kernel's alone */
        int i = 0;
        for (; i < p->n_kernels; i++) {
            const sn_kernel *q = p->kernels[i];
            if (q->kind == SN_KER_ATTENTION && q->anchor->op == SN_OP_ATTENTION_BWD_Q &&
                q->stage == SN_SUM_WHOLE && same_att_inputs(q, kv))
                break;
        }
        if (i == p->n_kernels) continue;
        sn_kernel *q = p->kernels[i], *z = new_kernel(s, SN_KER_ATTENTION, q->anchor);
        if (!z) return SN_ERR_OOM;
        int id = z->id;
        *z = *q; /* the dq kernel's args and accesses (the accesses are the arena's, shared) */
        z->id = id;
        z->stage = SN_ATT_DQ_ZERO;
        snprintf(z->name, sizeof z->name, "k%d_attention_dq_zero", z->id);
        q->stage = SN_ATT_DQ_STORE;
        snprintf(q->name, sizeof q->name, "k%d_attention_dq_store", q->id);
        kv->stage = SN_SUM_PARTIAL;
        size_t len = strlen(kv->name);
        if (len + 4 < sizeof kv->name) snprintf(kv->name + len, sizeof kv->name - len, "_dq");
        z->scratch = kv->scratch = q->scratch = new_scratch(s, sn_kernel_scratch_bytes(q));
        sn_kernel_work(z, &z->n_items, &z->serial); /* stages' items: pairs (kernel.h) */
        sn_kernel_work(q, &q->n_items, &q->serial);
        sn_kernel_work(kv, &kv->n_items, &kv->serial);
        /* zero, dk/dv, store at the first of the two places: the inputs of both are written
         * before either, and what reads dq, dk or dv comes after both */
        int at = i < j ? i : j, n = p->n_kernels - 1; /* z is the last */
        sn_kernel **ks = p->kernels;
        int w = 0;
        sn_kernel **order = sn_malloc(sizeof *order * (size_t)(n + 1), "the fuse pass's atomic dq", s->e);
        if (!order) return SN_ERR_OOM;
        for (int k = 0; k < n; k++) {
            if (k == at) order[w++] = z, order[w++] = kv, order[w++] = q;
            if (k != i && k != j) order[w++] = ks[k];
        }
        SN_ASSERT(w == n + 1);
        memcpy(ks, order, sizeof *order * (size_t)w);
        free(order);
        j = at + 1; /* kv's new place; the loop goes on after it */
    }
    return SN_OK;
}

sn_status sn_fuse_att_dkv_parts(fuse_state *s) {
    sn_program *p = s->p;
    for (int j = 0; j < p->n_kernels; j++) {
        sn_kernel *k = p->kernels[j];
        if (k->kind != SN_KER_ATTENTION || k->stage != SN_SUM_WHOLE || sn_att_dkv_parts(k) < 2 ||
            !sn_kernel_att_tensor_cores(k, s->t) || k->n_out + k->n_in + 1 > SN_KER_MAX_ARGS)
            continue; /* parts are the tensor-core dk/dv kernel's alone */
        k->dkv_parts = true; /* before the split: the scratch's size and the items read it */
        sn_kernel *f = split_in_two(s, k, "_parts");
        if (!f) return SN_ERR_OOM;
        snprintf(f->name, sizeof f->name, "k%d_attention_dkv_sum", f->id);
        /* f, the last kernel, right after k */
        memmove(p->kernels + j + 2, p->kernels + j + 1, sizeof *p->kernels * (size_t)(p->n_kernels - j - 2));
        p->kernels[++j] = f;
    }
    return SN_OK;
}

/* Every kernel reads only values written before it (or loaded with the program). */
sn_status sn_fuse_check_order(const fuse_state *s) {
    const sn_program *p = s->p;
    bool *written = sn_calloc((size_t)p->n_values + 1, 1, "the fuse pass's order check", s->e);
    if (!written) return SN_ERR_OOM;
    for (int v = 0; v < p->n_values; v++) {
        const sn_node *n = p->values[v].node; /* NULL: a scratch value */
        written[v] = n && (is_leaf(n->op) || n->op == SN_OP_FULL || is_shadow(s, n));
    }
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        for (int a = 0; a < ker->n_out + ker->n_in; a++) {
            int v = p->value_of[ker->args[a]->id];
            SN_ASSERT(v >= 0);
            while (p->values[v].alias >= 0) v = p->values[v].alias;
            if (a >= ker->n_out && !written[v])
                SN_ASSERT(!"fuse: a kernel reads a value that no earlier kernel wrote");
        }
        if (ker->stage == SN_SUM_FINISH && !written[ker->scratch])
            SN_ASSERT(!"fuse: a FINISH kernel before its PARTIAL kernel");
        for (int a = 0; a < ker->n_out; a++) {
            int v = p->value_of[ker->args[a]->id];
            while (p->values[v].alias >= 0) v = p->values[v].alias;
            written[v] = true;
        }
        if (ker->stage == SN_SUM_PARTIAL) written[ker->scratch] = true;
    }
    free(written);
    return SN_OK;
}

/* ---- values ---- */

static int dtype_bytes(sn_dtype t) { return sn_dtype_bits(t) / 8; }

/* One value per node with a buffer, in graph order; a reshape of a buffer that is not an
 * output aliases it. Room after them for the scratch of each two-stage kernel. */
sn_status sn_fuse_make_values(fuse_state *s) {
    const sn_graph *g = s->g;
    sn_program *p = s->p;
    size_t room = (size_t)g->n_nodes;
    for (int i = 0; i < g->n_nodes; i++) /* scratch values: sums over rows, classifiers, */
        room += sn_fuse_sums_rows(g->nodes[i]->op) ||          /* embedding gradients, */
                g->nodes[i]->op == SN_OP_CROSS_ENTROPY_BWD || g->nodes[i]->op == SN_OP_EMBEDDING_BWD ||
                g->nodes[i]->op == SN_OP_ATTENTION_BWD_Q ||   /* the atomic dq, */
                g->nodes[i]->op == SN_OP_ATTENTION_BWD_K ||   /* dk and dv in parts, */
                g->nodes[i]->op == SN_OP_ATTENTION_BWD_V ||
                g->nodes[i]->op == SN_OP_MATMUL ||            /* the decode split */
                g->nodes[i]->op == SN_OP_ATTENTION_CACHE;
    p->values = sn_calloc(room, sizeof *p->values, "the fuse pass's values", s->e);
    if (!p->values) return SN_ERR_OOM;
    s->values_room = (int)room;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        p->value_of[i] = -1;
        if (!s->mat[i]) continue;
        sn_value *v = &p->values[p->n_values];
        p->value_of[i] = p->n_values++;
        *v = (sn_value){.node = n, .bytes = sn_numel(n) * dtype_bytes(n->dtype), .alias = -1,
                        .first = -1, .last = -1};
        v->persistent = sn_op_kind(n->op) == SN_K_LEAF || s->is_out[i] || is_shadow(s, n) ||
                        frozen_block(s, n);
        if ((n->op == SN_OP_RESHAPE && s->mat[n->in[0]->id] && !s->is_out[i]) || frozen_block(s, n))
            v->alias = p->value_of[n->in[0]->id];
    }    return SN_OK;
}
