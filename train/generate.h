/* generate.h: generation with a KV cache: a prefill program runs the prompt once and leaves
 * each layer's keys and values in a cache of the model's context length; a one-token decode
 * program then reads the cache up to the current position and appends its own, so a new token
 * costs one token's forward (plus the attention read of the cache), not the whole context's.
 * Convention: the cache lives in the decode program's device memory across steps and calls;
 * only token ids, the rows of logits sampled and the prompt's keys and values (once per call,
 * see below) cross to the host. sample.c's sn_sample_logits chooses the tokens.
 *
 * The model's two graphs (models/gpt2.h's sn_gpt2_build_kv builds GPT-2's), built by a callback
 * for a batch B and T tokens, decode false or true:
 *   prefill (B, T): INPUT "idx" i32 (B, T), the tokens at positions 0..T-1. Outputs: layer 0's
 *     keys and values (B, Hkv, T, D), layer 1's, ..., then the logits (B, T, V), last, marked
 *     by sn_graph_set_logits.
 *   decode (B, 1): INPUTs "idx" and "pos" i32 (B, 1), the new token and its position; "mask" f32
 *     (B, 1, 1, S), 0 at the cache positions the row reads and -inf at the others; for each
 *     layer N, "k_cache.N" and "v_cache.N" f32 (B, Hkv, S, D). Outputs as the prefill's (T = 1).
 *
 *     sn_generator *gen;
 *     sn_generator_new(&(sn_generator_opts){.build = build, .user = &cfg, .ctx = 1024,
 *                      .n_layer = 12, .batch = 1}, device, &gen, &e);
 *     sn_generator_load(gen, sn_trainer_weights(trainer), &e);   // or a checkpoint's
 *     sn_generator_generate(gen, &prompt, &n_prompt, &sample_opts, out, NULL, NULL, &e);
 */
#ifndef SN_GENERATE_H
#define SN_GENERATE_H

#include "ir/ir.h"
#include "sample.h"
#include "train.h"

/* Builds the model's prefill (decode false) or decode graph into g (above). */
typedef sn_status (*sn_kv_build)(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e);

typedef struct {
    sn_kv_build build;
    void *user;  /* passed to build */
    int ctx;     /* S: positions the cache holds (the model's context length) */
    int n_layer; /* layers, each with its k and v */
    int batch;   /* B: prompts generated together */
    int window;  /* positions a row uses before its window slides (below), at most ctx: the
                    length the model was trained on; 0: ctx */
    bool nf4;    /* the frozen linear weights stored as NF4 (the nf4 pass, QLoRA's base: a u8
                    parameter of the weight's name, which the weight source fills with packed
                    bytes), each product unpacking its own before it */
    sn_dtype base16; /* SN_BF16 or SN_F16: the frozen linear weights stored so (the base16
                    pass: a trainer's 16-bit base, its values exact), each product reading
                    them widened; the weight source's floats are rounded to it; 0: f32 */
} sn_generator_opts;

typedef struct sn_generator sn_generator;

struct sn_device;
/* Builds and compiles the decode program for device (NULL: the reference interpreter) and
 * allocates it with the cache: 2 n_layer B Hkv S D floats. */
sn_status sn_generator_new(const sn_generator_opts *o, struct sn_device *device,
                           sn_generator **out, sn_err *e);
void sn_generator_free(sn_generator *g);

/* Copies every parameter of the decode program from w (the prefill programs read the decode
 * program's: sn_exec_new_sharing, one copy of the weights on the device). */
sn_status sn_generator_load(sn_generator *g, sn_weight_source w, sn_err *e);

/* Called after each generated step with the B new ids (ids[b]: prompt b's), step from 0;
 * returns false to stop there (a stop token): out's later entries are then left as they were. */
typedef bool (*sn_generate_cb)(void *user, int step, const int32_t *ids);

/* Per prompt b of the batch (opts.batch of them): prompts[b][0, lens[b]), 1 <= lens[b] <= window,
 * then o->n_new ids into out[b * n_new ...], each drawn as sn_sampler_generate draws (the same
 * seed and logits give the same ids); row b draws with seed + b, so a row's ids do not depend
 * on the other rows' (until a window slides, below). The prompts run once through a prefill
 * program compiled for the longest prompt rounded up to a power of two; the last few such
 * programs are kept for the next calls, each reading the decode program's weights. The prompts'
 * keys and values come down to the host and go up into the cache once per call (no
 * device-to-device path between two programs yet). When a row has used the window's positions
 * (a prompt and its new tokens past it), every row's window slides: its last window/2 tokens
 * run through the prefill again at positions from 0 (their logits the next draw's), and
 * decoding goes on after them; so a token past the window sees at least window/2 before it (the recomputing
 * sampler's window slides one token at a time: the two part there). on_step (may be NULL)
 * gets each step's ids as they are drawn, and may stop. */
sn_status sn_generator_generate(sn_generator *g, const int32_t *const *prompts, const int *lens,
                                const sn_sample_opts *o, int32_t *out, sn_generate_cb on_step,
                                void *user, sn_err *e);

/* Time spent by the last generate call: the prefill (its compile and allocation when no kept
 * program has the prompts' size; its run; the cache's upload), and each decode step's (n_new - 1
 * of them: the first token comes from the prefill's logits). step_s[i] is the step that
 * generated token i + 1 (its row's position lens[b] + i until a window slides). NULL until a
 * call has run. */
typedef struct {
    double prefill_s, decode_s;
    int n_steps;
    const double *step_s;
    int n_slides; /* steps that slid the windows (their prefill's time in step_s) */
} sn_generate_stats;
void sn_generator_stats(const sn_generator *g, sn_generate_stats *s);

/* Teacher forcing, for checks (batch 1): tokens[0, n_prompt) through the prefill, then each of
 * tokens[n_prompt, n) through one decode step; logits ((n - n_prompt + 1), V) gets the logits
 * after tokens[n_prompt - 1], ..., tokens[n - 1], the last n - n_prompt of them the decode
 * program's. n <= the context. */
sn_status sn_generator_forced(sn_generator *g, const int32_t *tokens, int n, int n_prompt,
                              float *logits, sn_err *e);

/* The decode program's compiled graph and executor, for tests and benchmarks (its logits: the
 * last output). */
const sn_graph *sn_generator_decode_graph(const sn_generator *g);
const struct sn_program *sn_generator_decode_program(const sn_generator *g);
struct sn_exec *sn_generator_decode_exec(const sn_generator *g);

#endif
