/* fuse_epilogue.c: what a GEMM kernel stores besides its product (kernel.h: the BIAS epilogue,
 * the GELU after it, DGELU, ACCUM, a product's 16-bit cast): the decisions that give those
 * nodes their home at the matmul, made before (sn_fuse_gemm_result) and after
 * (sn_fuse_gemm_epilogue) the grouping of fuse.c, and the GEMM kernel's args made from them
 * (sn_fuse_gemm_args). */
#include "fuse_int.h"

/* A GEMM's bias epilogue (kernel.h: BIAS) found from its matmul: the nodes the GEMM kernel
 * computes besides it (the bias's f32 cast, the add, the cast of the add) and its inputs. */
typedef struct {
    const sn_node *mm, *bias, *y; /* bias: the (N) vector read; y: the stored result */
    const sn_node *nodes[3];      /* with home at mm: y last */
    int n;
} epi_match;

/* Whether n joined nothing but the nodes of m (when it roots a group, every member of it is one
 * of them). */
static bool only_epilogue(const fuse_state *s, const epi_match *m, const sn_node *n) {
    for (int j = 0; j < s->g->n_nodes; j++) {
        if (!s->live[j] || s->home[j] != n->id) continue;
        bool in = j == m->bias->id; /* a bias grouped with its cast roots a kernel instead */
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

/* Whether y is what a 16-bit BIAS epilogue would store (bias_epilogue below, before any
 * grouping): y = cast(mm + f32(bias)) to bias's 16-bit dtype, mm an f32 matmul read only by the
 * add, the add and the bias's cast read by nothing else. Such a y roots its own kernel (the
 * GEMM's, once the epilogue joins it) rather than joining its readers' pointwise kernel, which
 * would read the f32 product (twice the bytes) and the GEMM store it (twice again). */
static bool bias_result(const fuse_state *s, const sn_node *y) {
    const sn_node *x = y->op == SN_OP_CAST ? y->in[0] : NULL;
    if (!x || (y->dtype != SN_BF16 && y->dtype != SN_F16) || x->op != SN_OP_ADD ||
        s->is_out[x->id] || sn_fuse_only_reader(s, x) != y)
        return false;
    for (int i = 0; i < 2; i++) {
        const sn_node *mm = x->in[i], *b = x->in[1 - i];
        if (mm->op == SN_OP_MATMUL && mm->dtype == SN_F32 && !mm->a.ta && mm->in[1]->rank == 2 &&
            mm->rank == x->rank && sn_fuse_only_reader(s, mm) == x && b->op == SN_OP_CAST &&
            b->dtype == SN_F32 && b->rank == 1 && b->in[0]->dtype == y->dtype &&
            sn_fuse_only_reader(s, b) == x)
            return true;
    }
    return false;
}

/* The bias epilogue of matmul mm, false when there is none: mm (f32, one GEMM: a rank-2 B
 * shared by A's rows, A not transposed) read by nothing but x = mm + b, b an (N) vector with a
 * buffer: f32 (then y = x), or the f32 cast of a bf16 or f16 vector read by nothing else (then
 * y is the one reader of x, its cast to that dtype); the kernels x, y and the cast were
 * grouped into hold nothing else. */
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
        if (!y || y->op != SN_OP_CAST || y->dtype != lo->dtype || lo->dtype == SN_F32 ||
            s->is_out[x->id])
            return false;
        *m = (epi_match){.mm = mm, .bias = lo, .y = y, .nodes = {b, x, y}, .n = 3};
    } else {
        if (b->dtype != SN_F32 || !s->mat[b->id]) return false;
        *m = (epi_match){.mm = mm, .bias = b, .y = x, .nodes = {x}, .n = 1};
    }
    for (int i = 0; i < m->n; i++)
        if (!only_epilogue(s, m, m->nodes[i])) return false;
    return true;
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

static bool same_shape(const sn_node *a, const sn_node *b) {
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Whether x is an f32 linear layer's x = mm + b (mm read by nothing else, b an f32 (N) leaf)
 * whose GEMM may carry a GELU epilogue. */
static bool f32_bias_add(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ADD || x->dtype != SN_F32 || s->is_out[x->id]) return false;
    for (int i = 0; i < 2; i++) {
        const sn_node *mm = x->in[i], *b = x->in[1 - i];
        if (gelu_gemm(mm) && mm->in[0]->dtype == SN_F32 && same_shape(mm, x) &&
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

/* The nodes a GELU epilogue adds to a GEMM: with home at the matmul, the stored result y last. */
typedef struct {
    const sn_node *nodes[5];
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

/* The gradient of a GELU through matmul mm (kernel.h: DGELU): o = gelu_bwd(h, mm) of f32
 * operands, or o = cast(gelu_bwd(f32(h), f32(cast(mm)))) to the 16-bit dtype of mm's operands
 * and h, where mm's cast roots a kernel alone (product_cast) and the rest one rooted at o that
 * holds nothing else; h, of mm's shape, has a buffer written before o. */
static bool dgelu_epilogue(const fuse_state *s, const sn_node *mm, gelu_match *m) {
    if (!gelu_gemm(mm) || s->home[mm->id] != mm->id || s->is_out[mm->id]) return false;
    sn_dtype t = mm->in[0]->dtype;
    bool wide = t == SN_F32;
    if (mm->in[1]->dtype != t || (!wide && t != SN_BF16 && t != SN_F16)) return false;
    const sn_node *c1 = NULL, *dy = mm;
    if (!wide) { /* the product's cast, then its f32 cast */
        c1 = sn_fuse_only_reader(s, mm);
        if (!c1 || c1->op != SN_OP_CAST || c1->dtype != t || s->home[c1->id] != c1->id ||
            s->members[c1->id] || s->into[c1->id])
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
    if (h->dtype != t || !s->mat[h->id] || !same_shape(h, mm) || h == mm->in[0] || h == mm->in[1])
        return false;
    *m = wide ? (gelu_match){.nodes = {gb}, .n = 1}
              : (gelu_match){.nodes = {dy, xh, gb, o}, .n = 4};
    if (kernel_of(s, o, m) < 0 || !written_before(s, h, o->id)) return false;
    if (!wide) *m = (gelu_match){.nodes = {c1, dy, xh, gb, o}, .n = 5};
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

/* ---- ACCUM: the product added to a matrix written before it (kernel.h) ---- */

/* ACCUM's nodes at matmul mm, false when there are none: mm (f32, two distinct operands, read
 * by nothing but x) and x = mm + c of mm's shape, c an f32 matrix of that shape (then y = x),
 * or the f32 cast, read by nothing else, of a matrix lo in mm's operands' 16-bit dtype (then y
 * is x's one reader, its cast to that dtype, and x is no output): cuBLASLt's C is of D's type.
 * m->bias is the matrix read (lo or c), written before the GEMM runs (accum_epilogue's
 * question); c may be a reshape (chunk_logits' running sum of the LM head's weight gradient: its
 * layout is the product's), no other view (its layout is not). A LoRA layer's base + adapter
 * product, and a gradient's sum of two products (x read by two GEMMs: LoRA's x @ A beside
 * x @ W, LLaMA's q, k, v; the tied embedding's gradient). */
static bool accum_nodes(const fuse_state *s, const sn_node *mm, epi_match *m) {
    const sn_node *x = sn_fuse_only_reader(s, mm);
    if (mm->op != SN_OP_MATMUL || mm->dtype != SN_F32 || mm->rank < 2 || s->is_out[mm->id] ||
        mm->in[0] == mm->in[1] || !x || x->op != SN_OP_ADD || x->dtype != SN_F32 ||
        !same_shape(mm, x))
        return false;
    const sn_node *c = x->in[0] == mm ? x->in[1] : x->in[0];
    if (c == mm || !same_shape(c, mm)) return false;
    if (c->dtype == SN_F32 && !(c->op == SN_OP_CAST && sn_fuse_only_reader(s, c) == x &&
                                c->in[0]->dtype == mm->in[0]->dtype)) {
        if (is_view(c->op) && c->op != SN_OP_RESHAPE) return false;
        *m = (epi_match){.mm = mm, .bias = c, .y = x, .nodes = {x}, .n = 1};
        return true;
    }
    const sn_node *lo = c->op == SN_OP_CAST ? c->in[0] : NULL, *y = sn_fuse_only_reader(s, x);
    if (!lo || c->dtype != SN_F32 || lo->dtype != mm->in[0]->dtype ||
        (lo->dtype != SN_BF16 && lo->dtype != SN_F16) || is_view(lo->op) ||
        !y || y->op != SN_OP_CAST || y->dtype != lo->dtype || s->is_out[x->id])
        return false;
    *m = (epi_match){.mm = mm, .bias = lo, .y = y, .nodes = {c, x, y}, .n = 3};
    return true;
}

/* Whether y is what an ACCUM epilogue would store (before any grouping), its c (under a
 * reshape) sure to have a buffer of its own: a leaf, another product, a 16-bit value a GEMM
 * stores (bias_result, product_cast), or another ACCUM's y (a running sum). Then y roots its
 * own kernel (the GEMM's, once the epilogue joins it), as bias_result's sums do; an f32 linear
 * layer's sum as c (read by nothing but y, it would join y's kernel) is left to the pointwise
 * kernel that reads both. */
static bool accum_result(const fuse_state *s, const sn_node *y) {
    const sn_node *x = y->op == SN_OP_CAST ? y->in[0] : y;
    epi_match m;
    if (x->op != SN_OP_ADD) return false;
    for (int i = 0; i < 2; i++) {
        if (x->in[i]->op != SN_OP_MATMUL || !accum_nodes(s, x->in[i], &m) || m.y != y) continue;
        const sn_node *c = m.bias;
        while (c->op == SN_OP_RESHAPE) c = c->in[0];
        if (is_leaf(c->op) || (c->op == SN_OP_MATMUL && c->dtype == SN_F32) ||
            (c->dtype != SN_F32 && (bias_result(s, c) || product_cast(s, c))) ||
            (c->op == SN_OP_ADD && accum_result(s, c)))
            return true;
    }
    return false;
}

/* The node whose buffer ACCUM reads as C for c: c, or what a reshape without a buffer of its
 * own views (the same elements in the same order). */
static const sn_node *c_buffer(const fuse_state *s, const sn_node *c) {
    while (c->op == SN_OP_RESHAPE && !s->mat[c->id]) c = c->in[0];
    return c;
}

/* ACCUM's match after the grouping: accum_nodes' nodes in kernels holding nothing else, mm a
 * kernel root, and the matrix read with a buffer of its own written by an earlier kernel. */
static bool accum_epilogue(const fuse_state *s, const sn_node *mm, epi_match *m) {
    if (s->home[mm->id] != mm->id || !accum_nodes(s, mm, m) || !s->mat[c_buffer(s, m->bias)->id] ||
        !written_before(s, m->bias, m->y->id))
        return false;
    for (int i = 0; i < m->n; i++)
        if (!only_epilogue(s, m, m->nodes[i])) return false;
    return true;
}

bool sn_fuse_gemm_result(const fuse_state *s, const sn_node *y) {
    return bias_result(s, y) || product_cast(s, y) || f32_gelu_bias(s, y) || accum_result(s, y);
}

void sn_fuse_gemm_epilogue(fuse_state *s, const sn_node *mm) {
    epi_match m;
    gelu_match gm = {0};
    if (bias_epilogue(s, mm, &m)) {
        join_epilogue(s, &m);
        if (!s->t->gelu_unfused && gelu_after(s, &m, &gm)) join_gelu(s, mm, &gm, m.y);
    } else if (!s->t->gelu_unfused && dgelu_epilogue(s, mm, &gm)) {
        join_gelu(s, mm, &gm, NULL);
    } else if (accum_epilogue(s, mm, &m)) {
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

void sn_fuse_gemm_args(fuse_state *s, sn_kernel *k) {
    const sn_node *mm = k->anchor, *add = NULL, *gelu = NULL, *dgelu = NULL, *cast = NULL;
    const sn_node *stored = NULL; /* the last node with its home here and a buffer */
    for (int j = mm->id + 1; j < s->g->n_nodes; j++) {
        const sn_node *x = s->g->nodes[j];
        if (s->home[j] != mm->id || !s->live[j]) continue;
        if (x->op == SN_OP_ADD && !add) add = x;
        if (x->op == SN_OP_GELU) gelu = x;
        if (x->op == SN_OP_GELU_BWD) dgelu = x;
        if (x->op == SN_OP_CAST && x->in[0] == mm && !cast) cast = x;
        if (s->mat[j]) stored = x;
    }
    if (dgelu) { /* args y, A, B, h */
        const sn_node *h = dgelu->in[0];
        if (s->home[h->id] == mm->id) h = h->in[0]; /* 16 bits: its f32 cast joined */
        SN_ASSERT(k->n_in == 2 && stored && s->mat[h->id]);
        k->gemm.epilogue = SN_EPI_DGELU;
        k->args[0] = stored;
        k->args[k->n_out + k->n_in++] = h;
        snprintf(k->name, sizeof k->name, "k%d_matmul_dgelu", k->id);
    } else if (add) { /* args y, [aux,] A, B, b */
        SN_ASSERT(k->n_in == 2);
        const sn_node *b = add->in[0] == mm ? add->in[1] : add->in[0], *y = add;
        if (b->op == SN_OP_CAST && s->home[b->id] == mm->id) { /* autocast's linear layer:
                                                                   rnd(v + f32(bias)) */
            b = b->in[0];
            y = sn_fuse_only_reader(s, add);
        }
        if (same_shape(b, mm)) { /* ACCUM: args y, A, B, c */
            b = c_buffer(s, b);
            SN_ASSERT(s->mat[b->id] && b->dtype == y->dtype && s->mat[y->id]);
            k->gemm.epilogue = SN_EPI_ACCUM;
            k->args[0] = y;
            k->args[k->n_out + k->n_in++] = b;
            snprintf(k->name, sizeof k->name, "k%d_matmul_accum", k->id);
            return;
        }
        SN_ASSERT(s->mat[b->id] && b->dtype == y->dtype && (gelu || s->mat[y->id]));
        k->gemm.epilogue = !gelu ? SN_EPI_BIAS : s->mat[y->id] ? SN_EPI_GELU_AUX_BIAS : SN_EPI_GELU_BIAS;
        k->args[0] = gelu ? stored : y; /* the epilogue's result */
        if (k->gemm.epilogue == SN_EPI_GELU_AUX_BIAS) { /* the sum: output 1, the aux */
            for (int i = k->n_out + k->n_in - 1; i >= k->n_out; i--) k->args[i + 1] = k->args[i];
            k->args[k->n_out++] = y;
        }
        k->args[k->n_out + k->n_in++] = b;
        snprintf(k->name, sizeof k->name, "k%d_matmul_bias%s", k->id,
                 !gelu ? "" : k->n_out == 2 ? "_gelu_aux" : "_gelu");
    } else if (cast) {
        k->args[0] = cast; /* the product's 16-bit cast, stored in its place (fuse.c) */
    }
}
