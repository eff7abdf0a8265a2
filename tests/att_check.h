/* att_check.h: what the CUDA attention tests share (att_check.c): a graph of one attention case
 * made into the real pipeline's kernels, run on the simulator in every thread order and compared
 * with the reference interpreter (normalized error over a tolerance of a few units of the
 * dtype's rounding), planted bugs put into the kernel text, and NVRTC's ptxas report.
 * Convention: outputs start poisoned (bytes 0x7f); a comparison fails on NaN. */
#ifndef SN_TEST_ATT_CHECK_H
#define SN_TEST_ATT_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/cuda/cuda.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "program/program.h"

typedef struct {
    const char *needle, *plant; /* the first needle in the text replaced by plant */
    double worst;               /* the largest err / tolerance seen; INFINITY: a launch failed */
    char failure[1024];         /* the first launch error */
    int checked;                /* outputs compared */
} run_result;

/* One case: q (b0, b1, T, D), k (b0, kv heads, S, D), v (.., S, Dv), for target sm_<sm>. */
typedef struct {
    int b0, b1;
    int64_t T, S, D, Dv;
    sn_dtype dt;
    int sm;
    int hkv; /* k's and v's heads (grouped-query attention: a divisor of b1); 0: b1 */
} att_case;

/* A planted bug: in case `which` (of the test's table), the first needle replaced by plant. */
typedef struct {
    int which;   /* a case of the test's table */
    int64_t T;   /* T = S instead of the case's, 0: the case's */
    const char *needle, *plant, *what;
} plant_case;

/* With atomic_dq, fuse compiles for a CUDA target whose dk/dv kernel accumulates dq
 * (sn_target.att_dq_atomic: the dq kernel becomes a zero and a store around it). */
extern bool atomic_dq;
/* With dkv_parts, fuse compiles for a CUDA target that runs grouped-query dk and dv in parts
 * (sn_target.att_dkv_parts: a PARTIAL kernel a query head, then their sum). */
extern bool dkv_parts;

int kv_heads(const att_case *c);
/* n's interpreter value: uniform in [-amp, amp), rounded to its dtype. */
void set_random(sn_interp *it, const sn_node *n, double amp);
/* g verified and made into kernels by the pipeline. */
sn_program *fuse(sn_graph *g);
/* Renders p's attention kernels (want of them) for tg, runs them in every thread order on the
 * interpreter's values of their inputs and compares each output with the interpreter's
 * (res->needle: planted first). */
void run_attention(const sn_program *p, const sn_interp *it, const sn_target *tg, int want,
                   const char *label, run_result *res);
/* The graph outputs a case's check compares: bits of o, lse, dq, dk, dv (from inputs q, k, v,
 * dout, through lse and o), or ATT_UNFUSED: lse alone and o from a given lse. */
enum { ATT_OUT_O = 1, ATT_OUT_LSE = 2, ATT_OUT_DQ = 4, ATT_OUT_DK = 8, ATT_OUT_DV = 16,
       ATT_OUT_ALL = 31, ATT_UNFUSED = 32 };
/* Case c's graph with outputs outs; in[] its inputs q, k, v, dout, the given lse (or NULL). */
sn_graph *case_graph(const att_case *c, int outs, sn_node *in[5]);
/* Forward and backward of case c (o and lse in one kernel, dq, dk, dv), or with unfused the
 * forward as lse alone and o from a given lse; needle/plant: a planted bug, or NULL. */
run_result check_case(const att_case *c, bool unfused, const char *needle, const char *plant);
/* The same for the outputs outs (every attention kernel of the program run and compared). */
run_result check_outputs(const att_case *c, int outs, const char *needle, const char *plant);
/* c's forward and backward kernels (o, lse, dq, dk, dv) with no interpreter. */
sn_program *case_program(const att_case *c, sn_graph **gp);
/* Compiles c's attention kernels with NVRTC for c->sm and prints ptxas's report; returns how
 * many spill, use a stack frame or more than 48 KiB of shared memory, or -1 when NVRTC is
 * missing (skipped). */
int nvrtc_check(const att_case *c);
/* The same with the first needle in the text replaced by plant; ptxas's warnings and its
 * "Potential Performance Loss" notes (a wgmma it serialized) count as bad too. */
int nvrtc_check_planted(const att_case *c, const char *needle, const char *plant);

#endif
