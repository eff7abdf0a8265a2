/* fuse_epilogue.c: what a GEMM kernel stores besides its product (kernel.h: the BIAS epilogue,
 * the GELU after it, DGELU, accum's c beside any of them, a product's 16-bit cast): the
 * decisions that give those nodes their home at the matmul, made before (sn_fuse_gemm_result)
 * and after (sn_fuse_gemm_epilogue) the grouping of fuse.c, and the GEMM kernel's args made
 * from them (sn_fuse_gemm_args). */
#include "fuse_int.h"

/* A GEMM's bias epilogue (kernel.h: BIAS), its accum or both, found from its matmul: the nodes
 * the GEMM kernel computes besides it (the bias's f32 cast, the add, c's f32 cast, its add, the
 * cast of the sum) and its inputs. */
typedef struct {
    const sn_node *mm, *bias, *y; /* bias: the (N) vector read, or NULL; y: the stored result */
    const sn_node *c;             /* accum's matrix read, or NULL */
    const sn_node *nodes[5];      /* with home at mm: y last */
    int n;
} epi_match;

/* Whether n joined nothing but the nodes of m (when it roots a group, every member of it is one
 * of them). */
static bool only_epilogue(const fuse_state *s, const epi_match *m, const sn_node *n) {
    for (int j = 0; j < s->g->n_nodes; j++) {
        if (!s->live[j] || s->home[j] != n->id) continue;
        /* a bias grouped with its cast roots a kernel instead */
        bool in = (m->bias && j == m->bias->id) || (m->c && j == m->c->id);
        for (int i = 0; i < m->n; i++) in = in || m->nodes[i]->id == j;
        if (!in) return false;
    }
    for (int i = 0; i < m->n; i++) /* and it joined one of them */
        if (s->home[n->id] == m->nodes[i]->id) return true;
    return false;
}

/* Whether y is the 16-bit cast of an f32 product read by nothing else (in the operands' dtype):
 * the GEMM stores it (gemm_stores_cast below), so it roots its own kernel rather than joining
 * its readers', which would read the f32 product. */
static bool product_cast(const fuse_state *s, const sn_node *y) {
    const sn_node *mm = y->op == SN_OP_CAST ? y->in[0] : NULL;
    return mm && mm->op == SN_OP_MATMUL && mm->dtype == SN_F32 &&
           (y->dtype == SN_BF16 || y->dtype == SN_F16) && y->dtype == mm->in[0]->dtype &&
           y->dtype == mm->in[1]->dtype && sn_fuse_only_reader(s, mm) == y;
}

int sn_fuse_kernel_pos(const fuse_state *s, int root) {
    if (s->g->nodes[root]->op != SN_OP_MATMUL) return root;
    int at = root;
    for (int j = root + 1; j < s->g->n_nodes; j++)
        if (s->live[j] && s->home[j] == root) at = j;
    return at;
}

/* Whether node h's buffer is written by a kernel made before position pos (or loaded). */
static bool written_before(const fuse_state *s, const sn_node *h, int pos) {
    while (is_view(h->op) && s->home[h->id] < 0) h = h->in[0]; /* a reshape sharing it */
    if (is_leaf(h->op)) return true;
    return s->home[h->id] >= 0 && sn_fuse_kernel_pos(s, s->home[h->id]) < pos;
}

/* ---- accum: the product's sum added to a matrix written before it (kernel.h) ---- */

/* accum's add after the sum x (the product, or its bias epilogue's sum): x read by nothing but
 * x2 = x + o of x's shape, where o is the f32 cast, read by nothing else, of a matrix c in the
 * 16-bit dtype lo (then the stored y is x2's one reader, its cast to lo, and x2 no output:
 * cuBLASLt's C is of D's type) or, lo being f32, an f32 matrix c itself, a reshape the one view
 * allowed (chunk_logits' running sum of the LM head's weight gradient: its layout is the
 * product's; then y = x2). Appends the nodes after x to m, sets its c and y. */
static bool accum_after(const fuse_state *s, const sn_node *x, sn_dtype lo, epi_match *m) {
    const sn_node *x2 = sn_fuse_only_reader(s, x);
    if (!x2 || x2->op != SN_OP_ADD || x2->dtype != SN_F32 || s->is_out[x->id] || !sn_same_shape(x2, x))
        return false;
    const sn_node *o = x2->in[0] == x ? x2->in[1] : x2->in[0];
    if (o == x || !sn_same_shape(o, x)) return false;
    if (lo == SN_F32) {
        if (o->dtype != SN_F32 || (is_view(o->op) && o->op != SN_OP_RESHAPE)) return false;
        m->c = o;
        m->y = m->nodes[m->n++] = x2;
        return true;
    }
    const sn_node *c = o->op == SN_OP_CAST && o->dtype == SN_F32 ? o->in[0] : NULL;
    const sn_node *y = sn_fuse_only_reader(s, x2);
    if (!c || c->dtype != lo || is_view(c->op) || sn_fuse_only_reader(s, o) != x2 ||
        s->is_out[x2->id] || !y || y->op != SN_OP_CAST || y->dtype != lo)
        return false;
    m->c = c;
    m->nodes[m->n++] = o;
    m->nodes[m->n++] = x2;
    m->y = m->nodes[m->n++] = y;
    return true;
}

/* accum's nodes at matmul mm with no bias, false when there are none: mm (f32, two distinct
 * operands) and its sum with c (accum_after), c 16-bit when the add reads the f32 cast, read by
 * nothing else, of a matrix in mm's operands' 16-bit dtype, else f32. m->c is the matrix read,
 * written before the GEMM runs (epilogue_ready's question). A LoRA layer's base + adapter product
 * (LLaMA's, without a bias), and a gradient's sum of two products (x read by two GEMMs: LoRA's
 * x @ A beside x @ W, LLaMA's q, k, v; the tied embedding's gradient). */
static bool accum_nodes(const fuse_state *s, const sn_node *mm, epi_match *m) {
    *m = (epi_match){.mm = mm};
    const sn_node *x = sn_fuse_only_reader(s, mm);
    if (mm->op != SN_OP_MATMUL || mm->dtype != SN_F32 || mm->rank < 2 || mm->in[0] == mm->in[1] ||
        !x || x->op != SN_OP_ADD)
        return false;
    const sn_node *o = x->in[0] == mm ? x->in[1] : x->in[0];
    sn_dtype t = mm->in[0]->dtype;
    bool low = (t == SN_BF16 || t == SN_F16) && o->op == SN_OP_CAST && o->dtype == SN_F32 &&
               o->in[0]->dtype == t && sn_fuse_only_reader(s, o) == x;
    return accum_after(s, mm, low ? t : SN_F32, m);
}

static bool accum_result(const fuse_state *s, const sn_node *y);
static bool bias_result(const fuse_state *s, const sn_node *y);

/* Whether accum's c (under a reshape) is sure to have a buffer of its own: a leaf, another
 * product, a 16-bit value a GEMM stores (bias_result, product_cast), or another accum's y (a
 * running sum: f32, or its 16-bit cast, lowrank_sum's chains). An f32 linear layer's sum as c
 * (read by nothing but y, it would join y's kernel) is not. */
static bool c_own_buffer(const fuse_state *s, const sn_node *c) {
    while (c->op == SN_OP_RESHAPE) c = c->in[0];
    return is_leaf(c->op) || (c->op == SN_OP_MATMUL && c->dtype == SN_F32) ||
           (c->dtype != SN_F32 && (bias_result(s, c) || product_cast(s, c))) ||
           ((c->op == SN_OP_ADD || c->op == SN_OP_CAST) && accum_result(s, c));
}

/* Whether y is what an accum GEMM with no bias would store (before any grouping), its c with a
 * buffer of its own. Then y roots its own kernel (the GEMM's, once the epilogue joins it), as
 * bias_result's sums do; otherwise the pointwise kernel reads both. */
static bool accum_result(const fuse_state *s, const sn_node *y) {
    const sn_node *x = y->op == SN_OP_CAST ? y->in[0] : y;
    epi_match m;
    if (x->op != SN_OP_ADD) return false;
    for (int i = 0; i < 2; i++)
        if (x->in[i]->op == SN_OP_MATMUL && accum_nodes(s, x->in[i], &m) && m.y == y &&
            c_own_buffer(s, m.c))
            return true;
    return false;
}

/* The node whose buffer accum reads as C for c: c, or what a reshape without a buffer of its
 * own views (the same elements in the same order). */
static const sn_node *c_buffer(const fuse_state *s, const sn_node *c) {
    while (c->op == SN_OP_RESHAPE && !s->mat[c->id]) c = c->in[0];
    return c;
}

/* After the grouping: m's nodes in kernels holding nothing else, and its c (if any) with a
 * buffer of its own written by an earlier kernel. */
static bool epilogue_ready(const fuse_state *s, const epi_match *m) {
    if (m->c && (!s->mat[c_buffer(s, m->c)->id] || !written_before(s, m->c, m->y->id)))
        return false;
    for (int i = 0; i < m->n; i++)
        if (!only_epilogue(s, m, m->nodes[i])) return false;
    return true;
}

/* accum's match with no bias after the grouping: accum_nodes' nodes, mm a kernel root. */
static bool accum_epilogue(const fuse_state *s, const sn_node *mm, epi_match *m) {
    return s->home[mm->id] == mm->id && accum_nodes(s, mm, m) && epilogue_ready(s, m);
}

/* ---- the bias epilogue (kernel.h: BIAS), with or without accum ---- */

/* Whether x is a 16-bit bias epilogue's f32 sum mm + f32(bias), bias of dtype t, mm an f32
 * matmul read only by x, the bias's cast read by nothing else. */
static bool bias_sum16(const fuse_state *s, const sn_node *x, sn_dtype t) {
    if (x->op != SN_OP_ADD || x->dtype != SN_F32) return false;
    for (int i = 0; i < 2; i++) {
        const sn_node *mm = x->in[i], *b = x->in[1 - i];
        if (mm->op == SN_OP_MATMUL && mm->dtype == SN_F32 && !mm->a.ta && mm->in[1]->rank == 2 &&
            mm->rank == x->rank && sn_fuse_only_reader(s, mm) == x && b->op == SN_OP_CAST &&
            b->dtype == SN_F32 && b->rank == 1 && b->in[0]->dtype == t &&
            sn_fuse_only_reader(s, b) == x)
            return true;
    }
    return false;
}

/* Whether y is what a 16-bit BIAS epilogue would store (bias_epilogue below, before any
 * grouping): y = cast(mm + f32(bias)) to bias's 16-bit dtype, mm an f32 matmul read only by the
 * add, the add and the bias's cast read by nothing else; or with accum y = cast((mm +
 * f32(bias)) + f32(c)), c of y's dtype with a buffer of its own, each add and cast read by
 * nothing but the next. Such a y roots its own kernel (the GEMM's, once the epilogue joins it)
 * rather than joining its readers' pointwise kernel, which would read the f32 product (twice
 * the bytes) and the GEMM store it (twice again). */
static bool bias_result(const fuse_state *s, const sn_node *y) {
    const sn_node *x = y->op == SN_OP_CAST ? y->in[0] : NULL;
    if (!x || (y->dtype != SN_BF16 && y->dtype != SN_F16) || x->op != SN_OP_ADD ||
        x->dtype != SN_F32 || s->is_out[x->id] || sn_fuse_only_reader(s, x) != y)
        return false;
    if (bias_sum16(s, x, y->dtype)) return true;
    for (int i = 0; i < 2 && !s->t->accum_plain; i++) { /* accum: x = x1 + f32(c) */
        const sn_node *x1 = x->in[i], *o = x->in[1 - i];
        if (x1 != o && !s->is_out[x1->id] && sn_fuse_only_reader(s, x1) == x &&
            bias_sum16(s, x1, y->dtype) && o->op == SN_OP_CAST && o->dtype == SN_F32 &&
            o->in[0]->dtype == y->dtype && sn_same_shape(o, x) && sn_fuse_only_reader(s, o) == x &&
            !is_view(o->in[0]->op) && c_own_buffer(s, o->in[0]))
            return true;
    }
    return false;
}

/* The bias epilogue of matmul mm, false when there is none: mm (f32, one GEMM: a rank-2 B
 * shared by A's rows, A not transposed) read by nothing but x = mm + b, b an (N) vector with a
 * buffer: f32 (then y = x), or the f32 cast of a bf16 or f16 vector read by nothing else (then
 * y is the one reader of x, its cast to that dtype, or with accum the cast of x's sum with a
 * matrix c of that dtype: accum_after); the kernels these nodes were grouped into hold nothing
 * else, and c was written before. */
static bool bias_epilogue(const fuse_state *s, const sn_node *mm, epi_match *m) {
    *m = (epi_match){.mm = mm};
    const sn_node *x = sn_fuse_only_reader(s, mm);
    if (mm->op != SN_OP_MATMUL || mm->dtype != SN_F32 || s->home[mm->id] != mm->id || mm->a.ta ||
        mm->in[1]->rank != 2 || !x || x->op != SN_OP_ADD || x->rank != mm->rank)
        return false;
    for (int d = 0; d < x->rank; d++)
        if (mm->shape[d] != x->shape[d]) return false;
    const sn_node *b = x->in[0] == mm ? x->in[1] : x->in[0];
    if (b == mm || b->rank != 1 || b->shape[0] != x->shape[x->rank - 1]) return false;
    if (b->op == SN_OP_CAST && b->dtype == SN_F32 && sn_fuse_only_reader(s, b) == x) {
        const sn_node *y = sn_fuse_only_reader(s, x), *lo = b->in[0];
        if (!y || lo->dtype == SN_F32 || s->is_out[x->id]) return false;
        if (y->op == SN_OP_CAST && y->dtype == lo->dtype) {
            *m = (epi_match){.mm = mm, .bias = lo, .y = y, .nodes = {b, x, y}, .n = 3};
        } else {
            *m = (epi_match){.mm = mm, .bias = lo, .nodes = {b, x}, .n = 2};
            if (s->t->accum_plain || !accum_after(s, x, lo->dtype, m)) return false;
        }
    } else {
        if (b->dtype != SN_F32 || !s->mat[b->id]) return false;
        *m = (epi_match){.mm = mm, .bias = b, .y = x, .nodes = {x}, .n = 1};
    }
    return epilogue_ready(s, m);
}

/* The epilogue's nodes join mm's GEMM kernel: y keeps its buffer, the others none; the bias
 * has a buffer (a low-precision bias its own kernel, the cast of its f32 master). */
static void join_epilogue(fuse_state *s, const epi_match *m) {
    for (int i = 0; i < m->n; i++) {
        s->home[m->nodes[i]->id] = m->mm->id;
        s->mat[m->nodes[i]->id] = m->nodes[i] == m->y;
    }
    s->mat[m->mm->id] = false;
    const sn_node *b = m->bias;
    if (!s->mat[b->id] || s->home[b->id] != b->id) {
        if (is_leaf(b->op)) s->mat[b->id] = true;
        else sn_fuse_make_root(s, b);
    }
}

/* Matmul mm's GEMM stores its cast y instead (kernel.h: NONE, y = rnd(v)): y, to the operands'
 * 16-bit dtype, is mm's only reader and a kernel alone (the backward's dx of the attention's
 * projection, which the attention kernels read in bf16). */
static void gemm_stores_cast(fuse_state *s, const sn_node *mm) {
    const sn_node *y = sn_fuse_only_reader(s, mm);
    if (mm->op != SN_OP_MATMUL || mm->dtype != SN_F32 || s->home[mm->id] != mm->id ||
        s->is_out[mm->id] || !y || y->op != SN_OP_CAST || y->dtype != mm->in[0]->dtype ||
        y->dtype != mm->in[1]->dtype || (y->dtype != SN_BF16 && y->dtype != SN_F16) ||
        s->home[y->id] != y->id || s->members[y->id] || s->into[y->id] || is_shadow(s, y))
        return;
    s->home[y->id] = mm->id;
    s->mat[mm->id] = false;
}

/* ---- the GELU epilogues (kernel.h: GELU_BIAS, GELU_AUX_BIAS, DGELU) ---- */

/* Whether matmul mm's GEMM may carry a GELU epilogue: one GEMM (A not transposed, B of rank 2,
 * two distinct operands) whose rows of N are a multiple of 8 (cuBLASLt's rule for the GELU
 * input matrix's leading dimension, which the aux has). */
static bool gelu_gemm(const sn_node *mm) {
    return mm->op == SN_OP_MATMUL && mm->dtype == SN_F32 && !mm->a.ta && mm->in[1]->rank == 2 &&
           mm->in[0] != mm->in[1] && mm->shape[mm->rank - 1] % 8 == 0;
}

/* Whether x is an f32 linear layer's x = mm + b (mm read by nothing else, b an f32 (N) leaf)
 * whose GEMM may carry a GELU epilogue. */
static bool f32_bias_add(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ADD || x->dtype != SN_F32 || s->is_out[x->id]) return false;
    for (int i = 0; i < 2; i++) {
        const sn_node *mm = x->in[i], *b = x->in[1 - i];
        if (gelu_gemm(mm) && mm->in[0]->dtype == SN_F32 && sn_same_shape(mm, x) &&
            sn_fuse_only_reader(s, mm) == x && is_leaf(b->op) && b->dtype == SN_F32 &&
            b->rank == 1 && b->shape[0] == x->shape[x->rank - 1])
            return true;
    }
    return false;
}

/* Whether y is the GELU of an f32 linear layer, or that layer's sum which a GELU reads: each
 * roots its own kernel (the GEMM's, once the epilogue joins it) rather than the two joining one
 * pointwise kernel that reads the f32 product. (In 16 bits bias_result already roots the sum's
 * cast, and the GELU's kernel holds nothing else.) */
static bool f32_gelu_bias(const fuse_state *s, const sn_node *y) {
    if (s->t->gelu_unfused) return false;
    if (y->op == SN_OP_GELU) return y->dtype == SN_F32 && f32_bias_add(s, y->in[0]);
    if (!f32_bias_add(s, y)) return false;
    for (int k = 0; k < s->n_users[y->id]; k++) {
        const sn_node *u = s->g->nodes[s->users[y->id][k]];
        if (s->live[u->id] && u->op == SN_OP_GELU && u->dtype == SN_F32) return true;
    }
    return false;
}

/* The nodes a GELU epilogue adds to a GEMM: with home at the matmul, the stored result y last. */
typedef struct {
    const sn_node *nodes[8];
    int n;
    bool aux; /* GELU_BIAS: the sum is read after the GEMM too (GELU_AUX_BIAS) */
} gelu_match;

/* The kernel the result o of m joins the GEMM from, or -1: rooted at o, or at o's f32 cast
 * (a bias gradient's column sum reads it: fuse.c colsum_widens), and holding the nodes of m
 * before o and nothing else, none of them stored. */
static int kernel_of(const fuse_state *s, const sn_node *o, const gelu_match *m) {
    int R = s->home[o->id];
    const sn_node *r = R >= 0 ? s->g->nodes[R] : NULL;
    bool own = R == o->id, cast = r && r->op == SN_OP_CAST && r->dtype == SN_F32 && r->in[0] == o;
    if ((!own && !cast) || s->members[R] != m->n - own || s->into[R] || s->into[o->id] ||
        is_shadow(s, o))
        return -1;
    for (int i = 0; i < m->n - 1; i++)
        if (s->home[m->nodes[i]->id] != R || s->mat[m->nodes[i]->id]) return -1;
    return R;
}

/* The GELU of bias epilogue e's sum y (kernel.h: GELU_BIAS, GELU_AUX_BIAS): o = gelu(y) of an f32
 * y, or o = cast(gelu(f32(y))) to y's 16-bit dtype, o's kernel holding nothing else; y's other
 * readers (the backward's gelu_bwd) all after o, which then reads the aux. */
static bool gelu_after(const fuse_state *s, const epi_match *e, gelu_match *m) {
    const sn_node *y = e->y;
    bool wide = y->dtype == SN_F32;
    if (!gelu_gemm(e->mm)) return false;
    for (int k = 0; k < s->n_users[y->id]; k++) {
        const sn_node *c = s->g->nodes[s->users[y->id][k]];
        const sn_node *g = wide ? c : sn_fuse_only_reader(s, c);
        if (!s->live[c->id] || (!wide && (c->op != SN_OP_CAST || c->dtype != SN_F32)) || !g ||
            g->op != SN_OP_GELU || g->dtype != SN_F32)
            continue;
        const sn_node *o = wide ? g : sn_fuse_only_reader(s, g);
        if (!o || (!wide && (o->op != SN_OP_CAST || o->dtype != y->dtype))) continue;
        *m = wide ? (gelu_match){.nodes = {g}, .n = 1} : (gelu_match){.nodes = {c, g, o}, .n = 3};
        if (kernel_of(s, o, m) < 0) continue;
        bool later = true;
        for (int j = 0; j < s->n_users[y->id] && later; j++) {
            const sn_node *u = s->g->nodes[s->users[y->id][j]];
            if (u == c || !s->live[u->id]) continue;
            later = u->id > o->id; /* its kernel is made at or after it */
            m->aux = true;
        }
        m->aux = m->aux || s->is_out[y->id];
        if (later) return true;
    }
    return false;
}

/* The gradient of a GELU through matmul mm (kernel.h: DGELU): o = gelu_bwd(h, p) of f32
 * operands, or o = cast(gelu_bwd(f32(h), f32(cast(p)))) to the 16-bit dtype of mm's operands
 * and h, p the product mm or, with acc (accum_epilogue's match), its sum with c; mm's cast (or
 * acc's stored sum) roots a kernel of its own (product_cast, accum_result) and the rest one
 * rooted at o that holds nothing else; h, of mm's shape, has a buffer written before o. */
static bool dgelu_epilogue(const fuse_state *s, const sn_node *mm, const epi_match *acc,
                           gelu_match *m) {
    if (!gelu_gemm(mm) || s->home[mm->id] != mm->id || s->is_out[mm->id] ||
        sn_numel(mm) < s->t->dgelu_min_elems) /* target.h: small ones are faster apart */
        return false;
    sn_dtype t = mm->in[0]->dtype;
    bool wide = t == SN_F32;
    if (mm->in[1]->dtype != t || (!wide && t != SN_BF16 && t != SN_F16)) return false;
    const sn_node *c1 = NULL, *dy = acc ? acc->y : mm;
    if (acc && acc->y->dtype != t) return false;
    if (!wide) { /* the product's (or sum's) cast, then its f32 cast */
        c1 = acc ? acc->y : sn_fuse_only_reader(s, mm);
        if (!c1 || c1->op != SN_OP_CAST || c1->dtype != t || s->home[c1->id] != c1->id ||
            (!acc && s->members[c1->id]) || s->into[c1->id])
            return false;
        dy = sn_fuse_only_reader(s, c1);
        if (!dy || dy->op != SN_OP_CAST || dy->dtype != SN_F32) return false;
    }
    const sn_node *gb = sn_fuse_only_reader(s, dy);
    if (!gb || gb->op != SN_OP_GELU_BWD || gb->in[1] != dy || gb->in[0] == dy) return false;
    const sn_node *xh = gb->in[0], *h = xh, *o = gb;
    if (!wide) {
        if (xh->op != SN_OP_CAST || xh->dtype != SN_F32 || sn_fuse_only_reader(s, xh) != gb)
            return false;
        h = xh->in[0];
        o = sn_fuse_only_reader(s, gb);
        if (!o || o->op != SN_OP_CAST || o->dtype != t) return false;
    }
    if (h->dtype != t || !s->mat[h->id] || !sn_same_shape(h, mm) || h == mm->in[0] || h == mm->in[1])
        return false;
    *m = wide ? (gelu_match){.nodes = {gb}, .n = 1}
              : (gelu_match){.nodes = {dy, xh, gb, o}, .n = 4};
    if (kernel_of(s, o, m) < 0 || !written_before(s, h, o->id)) return false;
    *m = (gelu_match){.n = 0};
    for (int i = 0; acc && i < acc->n; i++) m->nodes[m->n++] = acc->nodes[i];
    if (!wide && !acc) m->nodes[m->n++] = c1;
    if (!wide) m->nodes[m->n++] = dy, m->nodes[m->n++] = xh;
    m->nodes[m->n++] = gb;
    if (!wide) m->nodes[m->n++] = o;
    return true;
}

/* m's nodes join mm's GEMM kernel: the last keeps its buffer, the others none (the kernel they
 * leave, when o's f32 cast roots it, keeps that cast alone); without an aux, the bias
 * epilogue's sum goes without a buffer too. */
static void join_gelu(fuse_state *s, const sn_node *mm, const gelu_match *m, const sn_node *sum) {
    const sn_node *y = m->nodes[m->n - 1];
    int R = s->home[y->id];
    for (int i = 0; i < m->n; i++) {
        s->home[m->nodes[i]->id] = mm->id;
        s->mat[m->nodes[i]->id] = m->nodes[i] == y;
    }
    s->members[R] = 0;
    s->extra[R] = false;
    s->mat[mm->id] = false;
    if (sum && !m->aux) s->mat[sum->id] = false;
}

bool sn_fuse_gemm_result(const fuse_state *s, const sn_node *y) {
    return bias_result(s, y) || product_cast(s, y) || f32_gelu_bias(s, y) || accum_result(s, y);
}

void sn_fuse_gemm_epilogue(fuse_state *s, const sn_node *mm) {
    epi_match m;
    gelu_match gm = {0};
    bool gelu = !s->t->gelu_unfused;
    if (bias_epilogue(s, mm, &m)) {
        join_epilogue(s, &m);
        if (gelu && gelu_after(s, &m, &gm)) join_gelu(s, mm, &gm, m.y);
    } else if (gelu && dgelu_epilogue(s, mm, NULL, &gm)) {
        join_gelu(s, mm, &gm, NULL);
    } else if (accum_epilogue(s, mm, &m)) {
        if (gelu && !s->t->accum_plain && !s->t->dgelu_accum_unfused &&
            dgelu_epilogue(s, mm, &m, &gm)) {
            join_gelu(s, mm, &gm, NULL);
            return;
        }
        for (int i = 0; i < m.n; i++) {
            s->home[m.nodes[i]->id] = mm->id;
            s->mat[m.nodes[i]->id] = m.nodes[i] == m.y;
        }
        s->mat[mm->id] = false;
    } else {
        gemm_stores_cast(s, mm);
    }
}

/* ---- the GEMM kernel's args ---- */

/* What operand o of an add in mm's kernel reads: o, or its f32 cast's 16-bit input when the
 * cast joined the kernel (autocast's bias, accum's 16-bit c). */
static const sn_node *operand_read(const fuse_state *s, const sn_node *mm, const sn_node *o) {
    return o->op == SN_OP_CAST && s->home[o->id] == mm->id ? o->in[0] : o;
}

void sn_fuse_gemm_args(fuse_state *s, sn_kernel *k) {
    const sn_node *mm = k->anchor, *sum = mm, *bias = NULL, *c = NULL, *gelu = NULL;
    const sn_node *dgelu = NULL, *cast = NULL;
    const sn_node *stored = NULL; /* the last node with its home here and a buffer */
    for (int j = mm->id + 1; j < s->g->n_nodes; j++) {
        const sn_node *x = s->g->nodes[j];
        if (s->home[j] != mm->id || !s->live[j]) continue;
        if (x->op == SN_OP_ADD && (x->in[0] == sum || x->in[1] == sum)) { /* the sum's adds */
            const sn_node *o = operand_read(s, mm, x->in[0] == sum ? x->in[1] : x->in[0]);
            if (o->rank == 1 && !bias && sum == mm) bias = o;
            else c = c_buffer(s, o);
            sum = x;
        }
        if (x->op == SN_OP_GELU) gelu = x;
        if (x->op == SN_OP_GELU_BWD) dgelu = x;
        if (x->op == SN_OP_CAST && x->in[0] == mm && !cast) cast = x;
        if (s->mat[j]) stored = x;
    }
    SN_ASSERT(k->n_in == 2 && (!c || s->mat[c->id]));
    const char *what = "";
    if (dgelu) { /* args y, A, B, h [, c] */
        const sn_node *h = dgelu->in[0];
        if (s->home[h->id] == mm->id) h = h->in[0]; /* 16 bits: its f32 cast joined */
        SN_ASSERT(stored && s->mat[h->id]);
        k->gemm.epilogue = SN_EPI_DGELU;
        k->args[0] = stored;
        k->args[k->n_out + k->n_in++] = h;
        what = "_dgelu";
    } else if (bias) { /* args y, [aux,] A, B, b [, c] */
        /* the stored sum: the last add, or its cast (autocast's linear layer: rnd(v + f32(b))) */
        const sn_node *y = bias->dtype == SN_F32 ? sum : sn_fuse_only_reader(s, sum);
        SN_ASSERT(s->mat[bias->id] && bias->dtype == y->dtype && (gelu || s->mat[y->id]));
        k->gemm.epilogue = !gelu              ? SN_EPI_BIAS
                           : s->mat[y->id] ? SN_EPI_GELU_AUX_BIAS
                                           : SN_EPI_GELU_BIAS;
        k->args[0] = gelu ? stored : y; /* the epilogue's result */
        if (k->gemm.epilogue == SN_EPI_GELU_AUX_BIAS) { /* the sum: output 1, the aux */
            for (int i = k->n_out + k->n_in - 1; i >= k->n_out; i--) k->args[i + 1] = k->args[i];
            k->args[k->n_out++] = y;
        }
        k->args[k->n_out + k->n_in++] = bias;
        what = !gelu ? "_bias" : k->n_out == 2 ? "_bias_gelu_aux" : "_bias_gelu";
    } else if (c) { /* args y, A, B, c */
        k->args[0] = stored;
    } else if (cast) {
        k->args[0] = cast; /* the product's 16-bit cast, stored in its place (fuse.c) */
    }
    if (c) { /* accum: c last, of y's dtype */
        SN_ASSERT(c->dtype == k->args[0]->dtype);
        k->gemm.accum = true;
        k->args[k->n_out + k->n_in++] = c;
    }
    if (*what || c)
        snprintf(k->name, sizeof k->name, "k%d_matmul%s%s", k->id, what, c ? "_accum" : "");
}
