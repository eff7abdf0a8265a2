/* gemv_check.h: what the few-row product's suites share (test_nf4_gemv.c: W (K, N) in NF4;
 * test_gemv_t.c: W stored (N, K), and 16-bit weights): one product with its interpreter's
 * values and error bounds, its kernel as fuse makes it, the CUDA split run on the simulator,
 * and the sums in the order kernel.h states for the transposed kernels, bit for bit.
 * Convention: outputs and scratch are poisoned before every run; checks fail on NaN. */
#ifndef SN_TEST_GEMV_CHECK_H
#define SN_TEST_GEMV_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/cuda/cuda.h"
#include "program/program.h"
#include "runtime/device.h"
#include "sim/sim.h"
#include "codegen_util.h"

/* One product y = x @ W (or x @ W^T: tb) with x (M, K) (or (2, M / 2, K): batch dims folded),
 * W (K, N) (tb: stored (N, K)) of normal weights: NF4 (dequant_nf4 in dt, x in dt) or W16 (a
 * bf16 or f16 parameter `wdt` widened by a cast, x f32), x uniform in [-1, 1) rounded to its
 * dtype; the interpreter's y, and the bound K 2^-24 sum |x w| + |y| 2^-24 for each y. */
typedef struct {
    int64_t M, K, N;
    sn_dtype dt;   /* x's dtype */
    sn_dtype wdt;  /* the weights' dtype (NF4: dt) */
    bool tb, w16;
    sn_graph *g;
    sn_node *x, *w, *y; /* w: the matmul's operand 1 (the dequant_nf4 or the cast) */
    void *xb;      /* x in dt */
    void *src;     /* the weight's source: the packed bytes, or the 16-bit bits */
    float *xf;     /* [M K] x as f32 */
    float *wf;     /* [K N] the weights as the kernels make them, W's stored layout */
    double *want;  /* [M N] the interpreter's y */
    double *bound; /* [M N] */
} prod;

/* NF4, W (K, N): x and W in dt. */
void prod_new(prod *p, int64_t M, int64_t K, int64_t N, sn_dtype dt, bool batched, uint64_t seed);
/* Any layout and source: w16 takes dt as the weights' dtype (bf16 or f16) and x f32. */
void prod_new_as(prod *p, int64_t M, int64_t K, int64_t N, sn_dtype dt, bool batched,
                 uint64_t seed, bool tb, bool w16);
void prod_free(prod *p);
/* "NF4 W^T bf16" and the like, for messages. */
const char *prod_what(const prod *p, char *buf, size_t len);
/* The product's kernel as fuse makes it: args y, x, source (checked by the contract). */
sn_kernel prod_kernel(const prod *p);
/* y (f32) against the interpreter within the bound; "!(err <= bound)" fails on NaN. */
void check_y(const prod *p, const float *y, const char *how);
/* The fuse rule on the CPU device: x (M, 96) @ W (96, 128) (tb: W stored (128, 96); w16: a
 * 16-bit W widened) + b compiled for the CPU. At M <= SN_GEMV_MAX_M one gemv kernel reads the
 * source (no dequantize or cast kernel, no GEMM, the f32 weight without a value), else the
 * dequantize (right before the GEMM) or cast kernel and the GEMM; y + b run on d within the
 * bound of the interpreter. */
void check_fuse_rule(sn_device *d, int64_t M, sn_dtype dt, bool tb, bool w16, uint64_t seed);
/* Whether NVRTC is here (else prints why the NVRTC checks are skipped). */
bool have_nvrtc(void);
/* The n functions of cs compiled by NVRTC for sm_75, sm_80 and sm_90: no spills, no stack. */
void nvrtc_no_spills(const sn_cuda_source *cs, int n, int64_t M, int64_t K, int64_t N);

/* The CPU's order for W (K, N) (kernel.h): k ascending from 0, one fma a term. */
float order_cpu(const prod *p, int64_t m, int64_t n);
/* The transposed orders (kernel.h), from p->xf and p->wf: the CPU's 16 sums added pairwise,
 * and CUDA's 32 lanes over [k_lo, k_hi) added by the butterfly. */
float order_cpu_t(const prod *p, int64_t m, int64_t n);
float order_cuda_t(const prod *p, int64_t m, int64_t n, int64_t k_lo, int64_t k_hi);

/* p's kernel k compiled by each JIT j[l] (lanes[l] lanes, n of them), run whole and in three
 * uneven parts into NaN-poisoned outputs: within the bound, the bits of the first JIT's whole
 * run everywhere, and the bits of the CPU's stated order (order_cpu, transposed order_cpu_t). */
void cpu_lanes_and_parts(const prod *p, sn_kernel *k, sn_jit *const *j, const int *lanes, int n);
/* p's one-kernel product k rendered in cs for target t, loaded on the simulator (NULL, with the
 * reason printed, where this build has none) and run in both thread orders into NaN-poisoned
 * outputs: within the bound, the same bits in both orders, and transposed the bits of CUDA's
 * stated order over all of K (order_cuda_t). The module stays loaded for profile_run. */
sn_sim_module *sim_both_orders(const prod *p, const sn_kernel *k, const sn_target *t,
                               const sn_cuda_source *cs, const char *suite);
/* One more launch of k on a profiled load of cs (sim.h's counts, their verdicts into flags);
 * returns the share of the loaded sectors' bytes used. */
double profile_run(const prod *p, const sn_kernel *k, const sn_target *t,
                   const sn_cuda_source *cs, sn_sim_profile *prof, char *flags, size_t len);

/* A planted bug (NULL: none): the first needle in the kernels' text replaced; printf-style
 * with the parts S and y's elements MN. */
typedef struct {
    const char *needle, *plant, *what;
} gemv_plant;

/* p's product compiled for the CUDA target (sn_target_cuda(80): the split's PARTIAL and
 * FINISH, or the one kernel where the rule makes no parts), run on the simulator in both
 * thread orders (y and the scratch poisoned), NVRTC'd for sm_75/80/90 when nvrtc; returns
 * false where a check failed (with pl: the bug caught), asserts with none planted. The checks:
 * y within the bound of the interpreter; the same bits in both orders; y the parts (the
 * scratch PARTIAL wrote) added in f32 in part order, bit for bit; with tb, y the stated order's
 * bits (order_cuda_t over each part, the parts added in order). */
bool run_split(prod *p, bool nvrtc, const gemv_plant *pl, int64_t *parts_out);

#endif
