/* cuda_check.h: what the CUDA code generator's suites share (test_cuda.c: the emitter, the
 * renderer, NVRTC and the pointwise and whole-model kernels; test_cuda_rows.c: row, reduce and
 * classifier kernels; test_cuda_weights.c: the embedding gradient, the optimizer, NF4): a graph
 * fused into kernels, rendered as CUDA C, compiled by NVRTC, and run on the CPU by the SIMT
 * simulator (sim/sim.h) from the very text NVRTC gets, against the reference interpreter.
 * Convention: outputs are poisoned before every launch; each launch runs in two thread orders. */
#ifndef SN_TEST_CUDA_CHECK_H
#define SN_TEST_CUDA_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "codegen/cuda/cuda.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "sim/sim.h"
#include "harness.h"

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline sn_target sm(int arch) { return sn_target_cuda(arch); }

static inline size_t dtype_bytes(sn_dtype t) { return (size_t)sn_dtype_bits(t) / 8; }

/* ---- fused, rendered, compiled ---- */

/* g verified and fused into kernels (the pipeline's kernel stage). */
sn_program *fuse(sn_graph *g);
/* The program's kernels of `kind` into ks (p->n_kernels entries); returns how many.
 * SN_KER_KIND_COUNT: every kind the CUDA C renderer generates (not GEMMs). */
int kernels_of(const sn_program *p, sn_kernel_kind kind, const sn_kernel **ks);
int pointwise(const sn_program *p, const sn_kernel **ks);

/* The arch render() renders for: sm_80, or (a test that sets it, and sets it back) another. */
extern int render_sm;
/* ks rendered as one source for sm_<render_sm>; row_cache: the target's (row kernels keep
 * their rows in registers). */
sn_cuda_source render_cached(const sn_kernel *const *ks, int n, bool row_cache);
sn_cuda_source render(const sn_kernel *const *ks, int n);

/* GPT-2 `name`'s training graph at B x T; with the LM head in chunks of chunk_rows rows (0:
 * whole); loss_only: the loss its one output, as sinter train compiles it (training reads no
 * logits), else the model's outputs kept (the logits too). */
sn_graph *gpt2_training_with(const char *name, int B, int T, sn_precision precision,
                             int64_t chunk_rows, bool loss_only);
sn_graph *gpt2_training_at(const char *name, int B, int T, sn_precision precision);
sn_graph *gpt2_training(const char *name, int B, int T);

/* Whether this build has NVRTC; if not, checks that saying so is what compiling does. */
bool have_nvrtc(void);
/* Every generated kernel of g's program (all but GEMMs) and the trainer's optimizer step, in
 * one source per arch, compiled cold; no spills, no stack frame; prints the time, the unique
 * functions and the widest kernel. Frees g. */
void nvrtc_program(sn_graph *g, const char *model, int B, int T, const int *arch, int n_arch);

/* ---- the generated CUDA executed on the CPU ---- */

/* The SMs host_check's launches are sized for (0: unknown; a persistent kernel's grid). */
extern int host_sm_count;
/* src, exactly as NVRTC gets it, loaded into the SIMT simulator; NULL if there is no g++. */
sn_sim_module *host_compile(const char *src);
/* n values of v stored as dtype t (16-bit: rounded to nearest even), and read back. */
void to_buffer(sn_dtype t, const double *v, int64_t n, void *buf);
void from_buffer(sn_dtype t, const void *buf, int64_t n, double *v);
/* Runs kernel k (its function fn, compiled into h) with the interpreter's values of its inputs
 * and compares its outputs with the interpreter's (tol relative to the tensor's largest value):
 * with the launch sn_cuda_launch_dims gives, and for pointwise kernels also with a small grid
 * that makes the grid-stride loop go round, each in two thread orders. Returns the worst error
 * instead of failing when `caught` is set (a planted bug's test). */
double host_check(sn_sim_module *h, const sn_kernel *k, const char *fn, const sn_interp *it,
                  double tol, bool caught);
/* The i32 inputs interp_run gives (their numel values; NULL: drawn below vocab). */
extern const int32_t *fixed_i32;
/* The interpreter over g, every value kept: ids below `vocab`, parameters from their init rule
 * (init_rule) or normal draws, other floats normal. */
sn_interp *interp_run(const sn_graph *g, int vocab, bool init_rule);
/* Fuses g, renders its generated kernels (every kind but GEMMs) into one source, runs each on
 * the CPU against the interpreter; returns the number of kernels run (0: no g++). counts (may
 * be NULL) gets the kernels run per kind. */
int run_on_host(sn_graph *g, int vocab, bool init_rule, double tol, int *counts);

#endif
