/* thin_check.h: what the thin product's suites share (test_thin.c: the columns and rank forms;
 * test_thin_sum.c: the sum form): operands rounded to their dtype, whether NVRTC is there, and
 * a simulator module loaded or the reason there is none. */
#ifndef SN_TEST_THIN_CHECK_H
#define SN_TEST_THIN_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "sim/sim.h"

/* f[0 .. n) as dt (f32, or bf16/f16 rounded to nearest even), malloc'd. */
void *thin_to_dt(sn_dtype dt, const float *f, int64_t n);
/* Whether NVRTC compiles here; if not, prints "<suite>: <why>: skipping the NVRTC checks". */
bool thin_have_nvrtc(const char *suite);
/* src loaded into *h; false (*h NULL, "no simulator: .." in why) where this machine has none;
 * any other failure fails the test. */
bool thin_sim_load(const char *src, bool profiled, sn_sim_module **h, char *why, size_t len);

#endif
