/* harness.h: shared helpers for the Check suites: running a suite, comparing arrays by
 * normalized error (NaN fails) and trainers' states bit for bit, finding the repository's assets/. */
#ifndef SN_TEST_HARNESS_H
#define SN_TEST_HARNESS_H

#include <check.h>

#include "program/kernel.h"
#include <stddef.h>

/* Runs the suite (CK_FORK as Check decides), returns the process exit code. */
int sn_test_main(Suite *s);

/* max |a-b| / max(max|b|, floor); fails the test (with the index and both values) when it is
 * not <= tol, NaN included. $SN_TEST_WORST set: every call prints its worst (to measure). */
void sn_check_close(const char *what, const double *got, const double *want, size_t n,
                    double tol, double floor);

/* The loss gradient of parameter p of g, as interpreter it computes it (its values vals, already
 * set in it; restored), against central finite differences (h = 1e-5) at up to `points`
 * elements spread over p, to tol (floor 1e-3); fails when the largest gradient checked is not
 * above min_grad (a check of zeros proves nothing). */
struct sn_interp;
void sn_check_param_grad(struct sn_interp *it, const sn_graph *g, const sn_node *p, double *vals,
                         int points, double min_grad, double tol);

/* Every parameter's weights of trainer t (freed by sn_check_trained_only). */
struct sn_trainer;
float **sn_param_snapshot(struct sn_trainer *t);
/* Against snapshot `before` (freed): every parameter whose name `trained` accepts changed, every
 * other one is bit for bit as it was (a failure names it and `what`); returns how many changed. */
int sn_check_trained_only(struct sn_trainer *t, float **before, bool (*trained)(const char *name),
                          const char *what);

/* A copy of src (malloc'd) with the first needle replaced by `by`: a planted bug in a kernel's
 * text; fails the test when needle is not there. */
char *sn_test_replace_first(const char *src, const char *needle, const char *by);

/* Decoding over a KV cache (sn_attention_cache) as a test graph: inputs q (B, H, T, D), k_cache,
 * v_cache (B, Hkv, S, D|Dv), mask (B, 1, 1, S) and k, v (B, Hkv, T, D|Dv) of dtype dt (the mask
 * f32) set to random values in interpreter *it (keeping every value), about a third of the mask
 * -inf (at least one row wholly so) and the rest in (-1, 0]; outputs the op (*fused) and its
 * written-out form (*written: matmuls, mask, causal mask, softmax over the two score blocks,
 * k and v repeated for grouped-query attention), both run. */
sn_graph *sn_test_cache_attention(int B, int H, int Hkv, int T, int S, int D, int Dv, sn_dtype dt,
                                  struct sn_interp **it, const sn_node **fused, const sn_node **written);

/* The packed NF4 bytes (ir/nf4.h) of n weights drawn at random from seed (the dequantize
 * kernels' formula holds for any bytes; malloc'd), with the mean 2e-5 and the steps of groups
 * 0, 1, 2, 3, ... 1e-7, 600, 1e-3, 1, ...: group 0's weights are f16 subnormals, group 1's
 * overflow f16 (|scale| up to 76200) and its scales take both signs. */
uint8_t *sn_test_nf4_random(int64_t n, uint64_t seed);

/* Path of a file under the source tree's assets/ (env SN_ASSETS overrides it); static buffer. */
const char *sn_test_asset(const char *name);

/* The partial sums between a PARTIAL kernel and its FINISH kernel (kernel.h), as a test runs
 * them on the host one after the other: a PARTIAL kernel gets a fresh buffer of NaNs, its
 * FINISH kernel the same buffer (by the scratch value's index). embedding_bwd's buckets are
 * poisoned with words 0x00010001 instead (an entry left unwritten adds a row). */
float *sn_test_scratch(const sn_kernel *k);

/* The plan's graph callback (train/plan.h) for tests: tiny GPT-2 at micro-batch b with the
 * vocabulary and sequence length of ctx (an sn_test_tiny_shape *), the loss its one output. */
typedef struct {
    int vocab, seq;
} sn_test_tiny_shape;
sn_status sn_test_tiny_loss_graph(void *ctx, int b, sn_graph **out, sn_err *e);

/* Fails the test unless every parameter's weights and AdamW moments in a and b are equal bit
 * for bit (the parameter's name and which array in the message). */
struct sn_trainer;
void sn_test_same_state(const struct sn_trainer *a, const struct sn_trainer *b);

/* A trainer of g on d (NULL: the interpreter): sn_train_opts_default for `steps` with lr and
 * seed; the test fails if it cannot be made. */
struct sn_device;
struct sn_trainer *sn_test_trainer(sn_graph *g, struct sn_device *d, uint64_t seed, int steps,
                                   float lr);

/* n token ids below vocab drawn from seed (support/rng.h), and targets the model can learn:
 * (x * 5 + 3) % vocab. The fine-tuning suites' batches. */
void sn_test_rule_batch(int32_t *x, int32_t *y, int n, int vocab, uint64_t seed);
/* n token ids below vocab from a 64-bit LCG seeded by seed, targets (x * 3 + 1) % vocab: the
 * offload suites' batches (independent of support/rng.h). */
void sn_test_lcg_batch(int32_t *x, int32_t *y, int n, int vocab, uint64_t seed);

/* What t's evaluation program adds to the device (made now if it was not): its executor's own
 * persistent block, and its arena when it is not the training one's (plan.h sn_plan.eval). */
int64_t sn_test_eval_bytes(struct sn_trainer *t);

#endif
