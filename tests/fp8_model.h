/* fp8_model.h: the small GPT-2 the fp8 suites train (every product large enough for the fp8
 * pass: C 128, vocabulary 256, B T = 96 rows), through the graph passes with a policy, and its
 * weights and batch set by init rule from a seed in the interpreter or on a device. */
#ifndef SN_TEST_FP8_MODEL_H
#define SN_TEST_FP8_MODEL_H

#include "interp/interp.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/device.h"

enum { FP8_B = 2, FP8_T = 48 };
extern const sn_gpt2_config FP8_SMALL;

/* Built, bf16 autocast, differentiated, the fp8 pass with pol (stats into st, may be NULL). */
sn_graph *fp8_small_graph(sn_fp8_policy pol, sn_pipeline_stats *st);
/* Every parameter by its init rule from seed (biases made non-zero), the tokens and targets
 * (every seventh target -1: ignored), into the interpreter and (x not NULL) a device's
 * executor. */
void fp8_small_set(sn_interp *it, sn_exec *x, const sn_graph *g, uint64_t seed);
/* The parameter of g named name (fails the test when there is none). */
const sn_node *fp8_param(const sn_graph *g, const char *name);

#endif
