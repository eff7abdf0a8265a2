/* gemm_libs.h: what the three files of the gemm_libs bench share, one section per file.
 * Convention: row-major C(m,n) = op(A)(m,k) @ op(B)(k,n), beta = 0; transa 'T' means A is stored
 * (k,m), transb 'T' means B is stored (n,k). */
#ifndef SN_BENCH_GEMM_LIBS_H
#define SN_BENCH_GEMM_LIBS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "bench_json.h"

#ifdef SN_HAVE_DNNL
#include <dnnl.h>
#endif

#define DIE(...) (fprintf(stderr, "gemm_libs: " __VA_ARGS__), fputc('\n', stderr), exit(1))

/* One GEMM of a GPT-2 training step. */
typedef struct {
    const char *pass, *op; /* "fwd" / "bwd_dx" / "bwd_dw"; "qkv", ..., "lm_head" */
    int m, n, k;
    char ta, tb;
    int per_step; /* how many times one training step runs it: L, or 1 for the LM head */
} Shape;

enum { NSHAPE = 15 }; /* 5 GEMMs (4 per layer, the LM head) x forward, dX, dW */

/* One run's settings, the same in the parent and in every worker (it is rebuilt from the
 * model name, batch and seq passed on the worker's command line). */
typedef struct {
    const char *model;
    int batch, seq;   /* B, T: every GEMM has B*T rows, columns or depth */
    int c, vp, layers; /* the model's width C, vocabulary padded as the compiler pads it, L */
    int threads, reps, quick, measure_ref;
    Shape shape[NSHAPE];
} Run;

/* A library entry point. Variants of one group share a worker process. */
typedef struct {
    const char *group, *api;
    int bf16;     /* A and B in bf16, accumulation and C in fp32 */
    int epilogue; /* C = gelu_tanh(A@B + bias) fused */
} Variant;

enum { NVAR = 7 };

/* A worker: a group of variants in one process, with one environment setting. The variable named
 * in `knob` is removed from the inherited environment, then `env` (if any) is set; env NULL thus
 * means the library's own CPU detection, whatever the caller's environment says. */
typedef struct {
    const char *group, *knob, *env;
    int in_quick;
} WorkerSpec;

enum { NSPEC = 8 };

/* One GEMM problem over the worker's buffers. */
typedef struct {
    int m, n, k;
    char ta, tb;
    float *a, *b, *bias, *c; /* a: (m,k) or (k,m); b: (k,n) or (n,k); bias: (n); c: (m,n) */
    uint16_t *abf, *bbf;     /* bf16 copies of a and b (bf16 variants only) */
} Gemm;

/* A library's handle for one (variant, shape): created once, run many times. */
typedef struct {
    int var;
    Gemm g;
#ifdef SN_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t mem[4]; /* src, weights, bias, dst */
#endif
#ifdef SN_HAVE_OPENBLAS
    void (*cblas_sgemm)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c, int ldc);
#endif
} Plan;

/* The pipe protocol between the parent and a worker. */
typedef struct { int32_t var, shape, check; } Req; /* var < 0: exit; check: verify this call */
typedef struct {
    double ms, cpu_ms, err; /* cpu_ms: CPU time of the whole worker process during the call */
    int32_t ok;
    char impl[96], msg[200];
} Resp;
typedef struct { /* the worker's first message: its variants and whether each passed the small check */
    int32_t nvar, var[NVAR], ok[NVAR];
    char info[400];
} Hello;

typedef struct {
    const WorkerSpec *spec;
    pid_t pid;
    int rfd, wfd, alive;
    Hello hello;
} Worker;

/* ---- gemm_libs.c: the driver ---- */
double now_ms(void);
/* A record {"bench":"gemm_libs","scope":scope,"device":"cpu","model":..,"batch":..,"seq":..,
 * "ms_per_step":..,"tokens_per_s":..,"mfu":..}: tokens are batch*seq, mfu is flop / ms over
 * peak_gflops; each null where ms or peak_gflops is not positive. The caller adds its fields
 * and prints it (bj_print). */
bj *record_open(const Run *r, const char *scope, double ms, double flop, double peak_gflops);

/* ---- gemm_libs_lib.c: the libraries ---- */
extern const Variant variants[NVAR];
extern const WorkerSpec worker_specs[NSPEC];
int group_compiled(const char *group);
const char *env_label(const WorkerSpec *w);
/* Sets threads and reads the library's own description of itself into info. */
void group_init(const char *group, int threads, char *info, size_t len);
/* Returns 0, or -1 with msg filled (an unsupported combination, a library error). */
int plan_new(Plan *p, int var, const Gemm *g, char *impl, size_t impllen, char *msg, size_t msglen);
void plan_run(Plan *p);
void plan_free(Plan *p);

/* ---- gemm_libs_worker.c: shapes, the reference check, the worker process ---- */
/* Fills r->c, vp, layers and shape[] from r->model, batch and seq; returns 0, or -1 with msg. */
int run_shapes(Run *r, char *msg, size_t msglen);
int is_lm_head(const Shape *s);
int takes_epilogue(const Shape *s); /* the per-layer forward GEMMs: a Linear's bias + GELU */
void write_all(int fd, const void *buf, size_t n);
int read_all(int fd, void *buf, size_t n); /* 0, or -1 at end of file or error */
/* Starts this binary (self) as w's worker; 0 once its Hello has arrived, else -1. */
int spawn_worker(Worker *w, const char *self, const Run *r);
/* The worker process: argv after "--worker" as spawn_worker writes it. */
int worker_main(int argc, char **argv);

#endif
