/* graph.h: the vocabulary every installed header shares with sinter's own code: statuses and
 * error messages, dtypes, parameter initialisers, input roles, and the graph and its nodes as
 * opaque handles with their lifetime (sn_graph_new, sn_graph_free).
 * Convention: a program outside the tree sees sn_graph and sn_node only through functions
 * (frontend/sinter.h); ir/ir.h, which is not installed, completes both structs for the library. */
#ifndef SN_BASE_GRAPH_H
#define SN_BASE_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- errors ---------------------------------------------------------------------------- */

typedef enum {
    SN_OK = 0,
    SN_ERR_SHAPE,       /* shapes do not fit the op */
    SN_ERR_DTYPE,       /* dtypes do not fit the op */
    SN_ERR_INVALID,     /* bad argument or malformed graph */
    SN_ERR_PARSE,       /* IR text or a file's contents could not be read */
    SN_ERR_IO,          /* open/read/write failed */
    SN_ERR_OOM,         /* out of memory */
    SN_ERR_NUMERIC,     /* NaN or Inf where a number was expected */
    SN_ERR_UNSUPPORTED, /* not supported yet */
    SN_ERR_DEVICE,      /* device, driver or toolkit failure */
    SN_ERR_INTERNAL,    /* a bug in sinter: a pass broke a contract the next one relies on */
} sn_status;

/* A failure the caller can cause comes back as a status plus this message. */
typedef struct {
    sn_status code;
    char msg[768];
} sn_err;

/* Records a failure in e (if e is not NULL) and returns its code. */
sn_status sn_fail(sn_err *e, sn_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *sn_status_name(sn_status s);

/* ---- dtypes ---------------------------------------------------------------------------- */

/*   X(NAME, "text", bits, is_float) */
#define SN_DTYPES(X)                                                                               \
    X(F32, "f32", 32, 1)                                                                           \
    X(BF16, "bf16", 16, 1)                                                                         \
    X(F16, "f16", 16, 1)                                                                           \
    X(I32, "i32", 32, 0)                                                                           \
    X(U8, "u8", 8, 0) /* bytes: packed storage (an NF4 parameter's, ir/nf4.h), read by dequant_nf4 */ \
    /* 8-bit floats (OCP FP8; ir.h sn_dtype_round): made by casts, read by casts, products and  \
     * reshapes/permutes only (the fp8 pass's operands) */                                     \
    X(F8E4M3, "f8e4m3", 8, 1)                                                                      \
    X(F8E5M2, "f8e5m2", 8, 1)

typedef enum {
#define SN_X(name, text, bits, isf) SN_##name,
    SN_DTYPES(SN_X)
#undef SN_X
        SN_DTYPE_COUNT
} sn_dtype;

const char *sn_dtype_name(sn_dtype t);
int sn_dtype_bits(sn_dtype t);
bool sn_dtype_is_float(sn_dtype t);

/* How a program stores and multiplies its floats. fp32: everything f32. bf16 / fp16: products
 * (matmul, attention) take 16-bit operands with f32 accumulation, parameters stay f32 masters,
 * everything else f32 (fp16 needs loss scaling). tf32: f32 storage, CUDA GEMMs on tf32 tensor
 * cores (no graph rewrite; on the CPU the same as fp32). */
typedef enum {
    SN_PRECISION_FP32,
    SN_PRECISION_BF16,
    SN_PRECISION_FP16,
    SN_PRECISION_TF32,
    SN_PRECISION_COUNT
} sn_precision;

/* ---- leaves ---------------------------------------------------------------------------- */

#define SN_MAX_RANK 4

/* How a parameter starts. */
typedef enum { SN_INIT_ZEROS, SN_INIT_ONES, SN_INIT_NORMAL, SN_INIT_COUNT } sn_init;

/* What an INPUT is fed with: the trainer, the generator and the passes find an input by its
 * role, never by its name (the name is for messages and the IR's text). A graph has at most
 * one input of each role but SN_ROLE_NONE. */
typedef enum {
    SN_ROLE_NONE,       /* fed by whoever built the graph, by the node itself */
    SN_ROLE_TOKENS,     /* i32 (B, T): the token ids a language model reads */
    SN_ROLE_TARGETS,    /* i32 (B, T): the ids it should predict (the cross-entropy's targets) */
    SN_ROLE_LOSS_SCALE, /* f32 scalar: the dynamic loss scale (the fp16 autocast pass adds it) */
    SN_ROLE_POSITIONS,  /* i32: each token's position (a decode step's) */
    SN_ROLE_MASK,       /* f32: 0 where a key may be attended, -inf where not (a decode step's) */
    SN_ROLE_DROPOUT_SEED, /* f32 scalar: the step's dropout seed, an integer below 2^24 (the
                             trainer sets it each micro-batch; sn_dropout reads it) */
    SN_ROLE_COUNT
} sn_role;

/* ---- graphs ---------------------------------------------------------------------------- */

/* A graph owns its nodes; a node lives as long as its graph. */
typedef struct sn_graph sn_graph;
typedef struct sn_node sn_node;

sn_graph *sn_graph_new(void); /* NULL when out of memory */
void sn_graph_free(sn_graph *g);
/* The first error recorded while building g (a shape mistake, a bad argument), or NULL. */
const char *sn_graph_error(const sn_graph *g);
/* Its status: SN_OK, or the code of that first error. */
sn_status sn_graph_status(const sn_graph *g);
/* Marks n as a value a run must keep (the logits ...). */
void sn_graph_add_output(sn_graph *g, sn_node *n);
/* Keeps no value of g after a run (a training graph keeps its loss alone: add it again); the
 * logits' mark goes with them. */
void sn_graph_clear_outputs(sn_graph *g);

#endif
