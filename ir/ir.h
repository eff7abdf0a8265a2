/* ir.h: sinter's graph IR: dtypes, shapes, nodes, graphs, errors, and the services over them
 * (arena, shape rules, verifier, text dump and parse).
 * Convention: a graph owns its nodes, strings and constants through one arena, freed whole;
 * nodes are appended in topological order (inputs before users) and a node's id is its index. */
#ifndef SN_IR_H
#define SN_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/graph.h"
#include "ops.h"

/* ---- errors (sn_status, sn_err, sn_fail: base/graph.h) ----------------------------------- */

/* A bug, not a user error: print file:line and the condition, abort. */
#define SN_ASSERT(c)                                                                              \
    do {                                                                                          \
        if (!(c)) sn_assert_fail(__FILE__, __LINE__, #c);                                         \
    } while (0)
_Noreturn void sn_assert_fail(const char *file, int line, const char *cond);

/* ---- host allocation (alloc.c) --------------------------------------------------------- */

/* malloc, calloc and realloc that, when the memory is not there, return NULL with SN_ERR_OOM
 * in e: "out of memory: <what> needs <size> ...: use a smaller --batch or --seq, ...". realloc
 * leaves p allocated on failure. what: "the memory planner's value order". */
void *sn_malloc(size_t bytes, const char *what, sn_err *e);
void *sn_calloc(size_t n, size_t size, const char *what, sn_err *e);
void *sn_realloc(void *p, size_t bytes, const char *what, sn_err *e);
/* The SN_ERR_OOM failure those report, for allocations made another way (a device's). */
sn_status sn_fail_oom(sn_err *e, size_t bytes, const char *what);
/* "1.5 GiB", "12.0 KiB", "100 bytes"; returns buf. */
char *sn_bytes_str(int64_t bytes, char *buf, size_t len);

/* ---- dtypes ---------------------------------------------------------------------------- */

/* sn_dtype, its names and sizes: base/graph.h */
int sn_dtype_parse(const char *s, size_t len); /* -1 if unknown */
/* Rounds v to the nearest value representable in t (round-to-nearest-even). The 8-bit floats
 * saturate, as PTX's cvt.rn.satfinite and cuBLASLt's FP8 outputs do: a value beyond the largest
 * finite one (an infinity too) becomes that value of its sign (448 for f8e4m3, 57344 for
 * f8e5m2); a NaN stays a NaN. */
double sn_dtype_round(sn_dtype t, double v);
/* f8e4m3 or f8e5m2 */
bool sn_dtype_is_f8(sn_dtype t);
/* pow2_scale's value (ops.h): the largest power of two s with |x| s <= f for x finite and not
 * 0, within [2^-126, 2^127]; 1 for 0, an infinity or a NaN. f positive and finite. */
double sn_pow2_scale_of(double x, double f);
/* The largest finite value of a float dtype (448 for f8e4m3, 57344 for f8e5m2, 65504 for f16). */
double sn_dtype_max(sn_dtype t);

/* ---- ops ------------------------------------------------------------------------------- */

const char *sn_op_name(sn_op op);
int sn_op_parse(const char *s, size_t len); /* -1 if unknown */
sn_kind sn_op_kind(sn_op op);
int sn_op_min_inputs(sn_op op);
int sn_op_max_inputs(sn_op op);
bool sn_op_has_grad(sn_op op);
unsigned sn_op_attrs(sn_op op);

/* ---- nodes and graphs ------------------------------------------------------------------ */

/* SN_MAX_RANK, sn_init, sn_role, and the handles sn_graph and sn_node: base/graph.h */

const char *sn_init_name(sn_init i);

typedef struct {
    float f;              /* SN_A_F: scale, eps, fill value; SN_A_INIT: std of a normal init */
    int axis;             /* SN_A_AXIS */
    int keepdim;          /* SN_A_KEEP */
    int ta, tb;           /* SN_A_TRANS: transpose a / b (last two axes) */
    int perm[SN_MAX_RANK]; /* SN_A_PERM */
    int64_t start, end;   /* SN_A_RANGE */
    int ignore_index;     /* SN_A_IGNORE: targets equal to it add nothing to the loss */
    sn_init init;         /* SN_A_INIT */
    int frozen;           /* SN_A_INIT (PARAM): 1 = not trained (no gradient, no optimizer state) */
    int site;             /* SN_A_SITE: a dropout's number in its model (its mask's stream) */
} sn_attrs;

struct sn_node {
    int id;       /* index in graph->nodes */
    sn_op op;
    sn_dtype dtype;
    int rank;     /* 0..SN_MAX_RANK; rank 0 is a scalar */
    int64_t shape[SN_MAX_RANK];
    int n_in;
    sn_node **in; /* n_in inputs, all earlier in the graph */
    sn_attrs a;
    const char *name; /* INPUT and PARAM; NULL elsewhere */
    sn_role role;     /* INPUT: what it is fed with (found by it, not by name); NONE elsewhere */
    float *data;      /* CONST: numel values */
    sn_node *grad;    /* PARAM after autodiff: d loss / d param */
};

typedef struct sn_arena_block sn_arena_block;
typedef struct {
    sn_arena_block *head;
    size_t used_bytes; /* total handed out, for reports */
} sn_arena;

void *sn_arena_alloc(sn_arena *a, size_t size); /* zeroed, 16-byte aligned; NULL when out of memory */
char *sn_arena_strdup(sn_arena *a, const char *s);
void sn_arena_free(sn_arena *a);

struct sn_graph {
    sn_arena arena;
    sn_node **nodes; /* n_nodes, topological order */
    int n_nodes, cap_nodes;
    sn_node **outputs; /* nodes a run must keep (logits, loss ...) */
    int n_outputs, cap_outputs;
    sn_node *loss;   /* scalar loss, if any */
    sn_node *logits; /* a language model's next-token scores (.., V), if marked: the sampler
                        and the generator read them (sn_graph_set_logits) */
    int n_forward; /* nodes before autodiff appended the backward; n_nodes if none */
    bool has_backward;
    sn_err err; /* sticky: the first construction error; later constructors return NULL */
};

/* sn_graph_new, sn_graph_free, sn_graph_error, sn_graph_status, sn_graph_add_output: base/graph.h */
/* The INPUT of g with role r, or NULL (at most one has it: the verifier checks). */
sn_node *sn_graph_input(const sn_graph *g, sn_role r);
const char *sn_role_name(sn_role r); /* "tokens" */
/* What an input of role r must be, in words ("i32", "a float scalar", "float"; NULL for none),
 * and whether dtype t and rank fit it: one rule for the constructor and the verifier. */
const char *sn_role_needs(sn_role r);
bool sn_role_fits(sn_role r, sn_dtype t, int rank);
int sn_role_parse(const char *s, size_t len); /* -1 if unknown */

/* Appends a node after checking it with the shape rules. For ops whose output shape or dtype
 * is chosen by the caller (leaves, reshape, broadcast, pad, cast, embedding_bwd, dequant_nf4), set dtype,
 * rank and shape in proto; otherwise they are inferred. On a shape or dtype error, records a
 * message naming the op and the shapes in g->err and returns NULL (as it does when g->err is
 * already set or an input is NULL, and with SN_ERR_OOM in g->err when memory runs out). */
sn_node *sn_graph_append(sn_graph *g, const sn_node *proto);

int64_t sn_numel(const sn_node *n);
/* Whether a and b have the same rank and dimensions. */
bool sn_same_shape(const sn_node *a, const sn_node *b);
/* The most elements a tensor may have: 8 bytes each still fit in int64. */
#define SN_MAX_NUMEL (INT64_MAX / 8)
/* The product of shape[0..rank) in *out (when out is not NULL); false when a dimension is
 * negative or the product exceeds SN_MAX_NUMEL. Shapes read from text or files go through it. */
bool sn_shape_numel_checked(int rank, const int64_t *shape, int64_t *out);
int64_t sn_shape_numel(int rank, const int64_t *shape);
/* Writes "f32[4,64,768]" into buf; returns buf. */
char *sn_type_str(const sn_node *n, char *buf, size_t len);
char *sn_shape_str(int rank, const int64_t *shape, char *buf, size_t len);

/* ---- shape rules (shape.c) ------------------------------------------------------------- */

/* Checks n's inputs and attributes and fills n->dtype/rank/shape (or checks the caller's
 * choice for the ops listed at sn_graph_append). Returns 0, or -1 with a message in msg. */
int sn_infer(sn_node *n, char *msg, size_t len);
/* G, the query heads per key/value head of attention op n (grouped-query attention: q's
 * heads H over k's Hkv, its last leading dim; 1 when they are equal or there is none). q's
 * flat batch slice bq reads k's and v's slice bq / G. */
int64_t sn_attention_group(const sn_node *n);
/* numpy broadcast of two shapes (right-aligned); -1 if they do not broadcast. */
int sn_broadcast_shapes(int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out);

/* ---- verifier (verify.c) --------------------------------------------------------------- */

/* Checks every node: ids, input order, arity, shape rules, grads. The message names the node,
 * its op and the shapes. */
sn_status sn_verify(const sn_graph *g, sn_err *e);

/* ---- text form (print.c, parse.c) ------------------------------------------------------ */

void sn_graph_print(const sn_graph *g, FILE *f);
/* Returns a malloc'd string; caller frees. */
char *sn_graph_to_string(const sn_graph *g);
/* Reads the text printed by sn_graph_print. */
sn_status sn_graph_parse(const char *text, sn_graph **out, sn_err *e);

#endif
