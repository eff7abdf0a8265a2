/* fuse_epilogue.c: what a GEMM kernel stores besides its product (kernel.h: the BIAS epilogue,
 * a product's 16-bit cast): the decisions that give those nodes their home at the matmul, made
 * before (sn_fuse_gemm_result) and after (sn_fuse_gemm_epilogue) the grouping of fuse.c. */
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

bool sn_fuse_gemm_result(const fuse_state *s, const sn_node *y) {
    return bias_result(s, y) || product_cast(s, y);
}

void sn_fuse_gemm_epilogue(fuse_state *s, const sn_node *mm) {
    epi_match m;
    if (bias_epilogue(s, mm, &m)) join_epilogue(s, &m);
    else gemm_stores_cast(s, mm);
}
