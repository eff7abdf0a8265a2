/* fuse_int.h: the fuse pass's internals (its entry, sn_fuse, is in passes.h), one section per
 * file. Convention: every function takes the pass's fuse_state; the decisions (fuse.c) are made
 * before any access or kernel is built from them (fuse_access.c, fuse_kernels.c). */
#ifndef SN_FUSE_INT_H
#define SN_FUSE_INT_H

#include "program/program.h"

/* ---- fuse.c: the driver and the decisions ---- */

typedef struct {
    const sn_graph *g;
    sn_program *p;
    int **users;   /* [n_nodes] ids of the nodes reading each node */
    int *n_users;
    bool *live;    /* reaches an output */
    bool *mat;     /* has a buffer */
    bool *is_out;  /* graph output, loss or gradient */
    int *home;     /* the root of the kernel that computes the node; -1: none (leaves, FULL,
                      views folded into accesses or sharing their input's buffer) */
    const sn_node **into; /* a concatenation (an add of pads along one axis that tile it)
                             whose parts are all attention outputs written straight into its
                             buffer: for the concatenation, the pads, adds and views under it
                             and those attention outputs, the concatenation; for an attention
                             forward whose o its kernel writes into the permute that reads it
                             (fuse.c: fwd_into), and that permute, the permute; else NULL */
    /* per root: */
    const sn_node **anchor; /* the row op its kernel computes, or NULL */
    const sn_node **space;  /* the node whose shape is its kernel's index space */
    int *members;           /* nodes that joined it */
    bool *extra;            /* a node joined it as a stored value or as its row op */
    bool *solo;             /* takes only single-reader chains (its kernel overflowed before) */
    int overflowed;         /* the root whose kernel ran out of args or instructions, or -1 */
    const sn_node **read_as; /* a column sum that reads, in place of its operand (an f32 cast
                                of a 16-bit value, through reshapes, with no buffer), that
                                value, widened as it is loaded (fuse.c: colsum_widens) */
    bool shadows;           /* parameters' 16-bit casts are weight shadows (program.h) */
    int values_room;        /* p->values' length: a value per node, a scratch per two-stage op */
    const sn_target *t;     /* what the kernels are for */
    sn_err *e;
} fuse_state;

static inline bool is_view(sn_op op) {
    return sn_op_kind(op) == SN_K_LAYOUT && op != SN_OP_CONCAT;
}
static inline bool is_row(sn_op op) { return sn_op_kind(op) == SN_K_ROW; }
static inline bool is_leaf(sn_op op) {
    return op == SN_OP_INPUT || op == SN_OP_PARAM || op == SN_OP_CONST;
}
/* Whether x is a weight shadow (program.h): a 16-bit float cast of a parameter. */
static inline bool is_shadow(const fuse_state *s, const sn_node *x) {
    return s->shadows && x->op == SN_OP_CAST && x->in[0]->op == SN_OP_PARAM &&
           (x->dtype == SN_BF16 || x->dtype == SN_F16);
}
/* Whether x is a frozen block (program.h): rows of frozen parameters or weight shadows
 * concatenated, no kernel's output but a persistent value starting at its first part (memplan
 * lays them out in order). */
static inline bool frozen_block(const fuse_state *s, const sn_node *x) {
    if (s->is_out[x->id] || !sn_frozen_block(x)) return false;
    for (int k = 0; k < x->n_in; k++)
        if (x->in[k]->op == SN_OP_CAST && !is_shadow(s, x->in[k])) return false;
    return true;
}

/* A node roots a kernel of its own: it has a buffer, and is its kernel's index space (a row op
 * its anchor). */
void sn_fuse_make_root(fuse_state *s, const sn_node *n);

/* ---- fuse_epilogue.c: what a GEMM stores besides its product ---- */

/* Before the grouping: whether y is what a GEMM will store (a biased product's 16-bit cast, the
 * BIAS epilogue's result; a product's 16-bit cast): y then roots a kernel of its own rather than
 * joining its readers'. */
bool sn_fuse_gemm_result(const fuse_state *s, const sn_node *y);
/* After it: the bias add (and its casts, and a GELU after them), a GELU's gradient, or the cast
 * that reads matmul mm join mm's GEMM kernel (kernel.h: BIAS, GELU_BIAS, GELU_AUX_BIAS, DGELU,
 * or NONE storing the cast) where they can; nothing for another node. */
void sn_fuse_gemm_epilogue(fuse_state *s, const sn_node *mm);
/* Where the kernel rooted at `root` is made (fuse.c build): at its root, or a GEMM's at the last
 * node of its epilogue. */
int sn_fuse_kernel_pos(const fuse_state *s, int root);
/* The args of GEMM kernel k, made with its operands A, B as its inputs: its epilogue's
 * (kernel.h), from the nodes with home at its matmul. */
void sn_fuse_gemm_args(fuse_state *s, sn_kernel *k);

/* ---- fuse_thin.c: the thin product (kernel.h: SN_KER_THIN) ---- */
/* GEMM kernel k, just made, becomes a thin product where the target makes them and its matmul,
 * epilogue and args fit (kernel.h). */
void sn_fuse_thin(fuse_state *s, sn_kernel *k);

/* ---- fuse_gemv.c: the few-row product (kernel.h: SN_KER_GEMV) ---- */

/* After the grouping, before the GEMM epilogues: each dequant_nf4, or f32 cast of a 16-bit
 * value, read by one matmul of few rows gets its home at that matmul and no buffer. */
void sn_fuse_gemv_decide(fuse_state *s);
/* Whether matmul mm's kernel is the few-row product (it takes no epilogue). */
bool sn_fuse_is_gemv(const fuse_state *s, const sn_node *mm);

/* ---- fuse_into.c: values written straight into another's buffer ---- */

bool sn_fuse_is_att_out(sn_op op); /* attention_bwd_q, _k or _v */
/* y, a concatenation (add of pads) of attention backward outputs each read by nothing else:
 * marks it and its parts written into (into[]); false when y is something else. */
bool sn_fuse_concat_into(fuse_state *s, const sn_node *y);
/* After the other decisions: the parts keep no buffer, the concatenation one and no kernel. */
void sn_fuse_settle_into(fuse_state *s);
/* Attention forward x writes o straight into the permute that reads it (kernel.h). */
bool sn_fuse_fwd_into(fuse_state *s, const sn_node *x);

/* ---- fuse_access.c: views folded into strided, masked accesses ---- */

typedef struct pw_build pw_build; /* a kernel being built (fuse_kernels.c) */

/* A node as seen through folded views: element (i_0, ..) is base[offset + sum i_d stride[d]];
 * when masked, coordinates with i_{mask_axis} outside [lo, hi) read 0 (pad, concat). */
typedef struct {
    const sn_node *base; /* materialised */
    int64_t offset;
    int64_t stride[SN_MAX_RANK]; /* over the viewed node's dims */
    bool masked;
    int mask_axis; /* in the viewed node's dims */
    int64_t lo, hi;
} view_map;

/* The map of node n as seen through folded views, down to a materialised base; false when the
 * chain is not a strided view. */
bool sn_fuse_map_of(const fuse_state *s, const sn_node *n, view_map *m);
/* The map of view n applied to the map of its input. */
bool sn_fuse_map_through(const fuse_state *s, const sn_node *n, view_map *m);
/* The live reader of n when it has exactly one and n is no output, else NULL. */
const sn_node *sn_fuse_only_reader(const fuse_state *s, const sn_node *n);
/* Where attention output a is written in the buffer of concatenation y (a chain of permutes
 * and reshapes from a to a pad, then adds up to y): base y, strides over a's dims; false when
 * the chain is not that or not strided. */
bool sn_fuse_out_map(const fuse_state *s, const sn_node *a, const sn_node *y, view_map *m);
/* An access reading map m as a tensor of `like`'s shape, which broadcasts right-aligned into
 * the index space. */
sn_status sn_fuse_push_access(fuse_state *s, pw_build *b, const sn_node *like, const view_map *m,
                              sn_ref *ref);
/* Part i of concat n, read as n's shape (its accesses add up to the concatenation). */
sn_status sn_fuse_concat_part(fuse_state *s, pw_build *b, const sn_node *n, int i, sn_ref *ref);
/* How the row op n reads operand i, which is not per element of its row. */
sn_status sn_fuse_row_operand_access(fuse_state *s, pw_build *b, const sn_node *n, int i,
                                     sn_ref *ref);
/* The failure of a view chain into x that is not a strided view. */
sn_status sn_fuse_not_strided(fuse_state *s, const sn_node *x);

/* ---- fuse_kernels.c: the kernels and values built from the decisions ---- */

enum { MAX_INSTR = SN_KER_MAX_INSTR }; /* instructions in one fused kernel (kernel.h) */

/* A kernel being built: its instructions and accesses over an index space, its inputs (the
 * accesses' `arg` counts inputs until the outputs are known) and the values it stores. */
struct pw_build {
    int G;               /* the root the kernel is built at */
    const sn_node *root; /* for messages */
    int rank;
    int64_t shape[SN_MAX_RANK];
    sn_pw_instr instr[MAX_INSTR];
    sn_access access[SN_KER_MAX_ARGS];
    int n_instr, n_access;
    const sn_node *in[SN_KER_MAX_ARGS];
    int n_in;
    const sn_node *out[SN_KER_MAX_ARGS];
    int out_instr[SN_KER_MAX_ARGS];
    int n_out;
    int row_instr;       /* the row op's instruction, or -1 */
};

/* The failure of b's kernel running out of args or instructions; sets s->overflowed. */
sn_status sn_fuse_too_many(fuse_state *s, pw_build *b);
/* p->values and p->value_of: one value per node with a buffer (s->mat). */
sn_status sn_fuse_make_values(fuse_state *s);
/* The kernel rooted at `root`: a pointwise group, or a row op with its prologue and epilogue. */
sn_status sn_fuse_group_kernel(fuse_state *s, const sn_node *root);
/* A view with a buffer of its own: a copy of what it views. */
sn_status sn_fuse_copy_kernel(fuse_state *s, const sn_node *v);
/* A kernel of one compute node (a row op with nothing fused reads its inputs as args). */
sn_status sn_fuse_compute_kernel(fuse_state *s, const sn_node *n);
/* The kernel k of a row op that sums over every row becomes kernel.h's PARTIAL kernel, and
 * the FINISH kernel follows it, with their scratch value. */
sn_status sn_fuse_split_sum(fuse_state *s, sn_kernel *k);
/* The cross_entropy_bwd kernel k also computes the loss `loss` (kernel.h: the classifier):
 * it becomes a PARTIAL kernel of a partial sum a row, and the FINISH kernel follows it. */
sn_status sn_fuse_classifier(fuse_state *s, sn_kernel *k, const sn_node *loss);
/* The kernel k of embedding_bwd becomes kernel.h's BUCKET kernel, and the ROWS kernel
 * follows it, with their scratch value. */
sn_status sn_fuse_split_gather(fuse_state *s, sn_kernel *k);
/* The decode split (kernel.h; sn_target.split_decode): the few-row product or attention_cache
 * kernel k, whose shapes call for parts (sn_split_parts > 1), becomes their PARTIAL kernel and a
 * FINISH kernel follows it, with their scratch value; the thin product's sum form alike (always
 * split: kernel.h). */
sn_status sn_fuse_split_decode(fuse_state *s, sn_kernel *k);
/* The atomic dq (kernel.h; sn_target.att_dq_atomic): each dq kernel whose six inputs and scale
 * are a tensor-core dk/dv kernel's (sn_kernel_att_tensor_cores) becomes its DQ_STORE kernel, and a DQ_ZERO kernel precedes that dk/dv
 * kernel, with their scratch value; the three run where the first of the two kernels was. */
sn_status sn_fuse_att_dq_atomic(fuse_state *s);
/* Grouped-query dk and dv in parts (kernel.h; sn_target.att_dkv_parts): each tensor-core
 * dk/dv kernel that sn_att_dkv_parts splits becomes the PARTIAL kernel, its FINISH right after
 * it, with their scratch value. */
sn_status sn_fuse_att_dkv_parts(fuse_state *s);
/* Whether op's kernel runs as PARTIAL and FINISH: a row op that sums over every row (the
 * norm weight gradients, cross-entropy's mean loss). */
static inline bool sn_fuse_sums_rows(sn_op op) {
    const sn_row_facts *f = sn_row_facts_of(op);
    return f && f->serial;
}
/* Asserts that every kernel reads only values written before it (or loaded with the program). */
sn_status sn_fuse_check_order(const fuse_state *s);

/* ---- fuse_pair.c: a norm's dx with its weight gradient's sums ---- */

/* After the kernels are made: each norm weight gradient's PARTIAL kernel and the kernel of its
 * dx, right before it or right after its FINISH, become the norm backward pair (kernel.h) in the
 * first one's place, where they can (the other kernels as they were). */
sn_status sn_fuse_norm_pairs(fuse_state *s);

#endif
