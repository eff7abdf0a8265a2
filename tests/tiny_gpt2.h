/* tiny_gpt2.h: the tiny GPT-2 training program shared by the compiled-backend suites (attention
 * fused or written out, vocabulary 250 padded to 256) and the check that its compiled program
 * computes what the reference interpreter does. */
#ifndef SN_TEST_TINY_GPT2_H
#define SN_TEST_TINY_GPT2_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "passes/pipeline.h"
#include "program/target.h"

enum { TINY_B = 2, TINY_T = 24, TINY_VOCAB = 250 }; /* 250 pads to 256: padding is real */

/* Built and run through the pipeline (pad_vocab, attention if asked, autodiff). */
sn_graph *tiny_training_graph(bool fuse_attention);
/* The same at a precision (bf16 / fp16: the autocast pass runs). */
sn_graph *tiny_training_graph_at(bool fuse_attention, sn_precision precision);
/* Built and compiled with options o (stats into st, may be NULL), no checks on the stats. */
sn_graph *tiny_training_graph_opts(const sn_pipeline_opts *o, sn_pipeline_stats *st);
/* With LoRA adapters (rank 4, alpha 8) on every linear layer, at a precision, with autodiff
 * (stats into st, may be NULL). */
sn_graph *tiny_lora_graph(sn_precision precision, sn_pipeline_stats *st);
/* The INPUT named name, or NULL. */
sn_node *tiny_input(const sn_graph *g, const char *name);
/* (B, T) token ids and targets from seed; every ninth target is -1 (ignored). */
void tiny_tokens(int32_t *x, int32_t *y, uint64_t seed);

typedef struct {
    int64_t arena_planned, arena_measured, arena_no_reuse;
} tiny_memory;

/* Runs g's compiled program (fuse, memplan, the CPU device) and the interpreter with the same
 * batch and weights (init rules, seed) and checks the loss and every gradient within 1e-4
 * (label names the case in messages); returns the memory figures. */
tiny_memory tiny_check_compiled(sn_graph *g, uint64_t seed, const char *label);
/* The same within tol (normalized max error) instead of 1e-4. */
tiny_memory tiny_check_compiled_tol(sn_graph *g, uint64_t seed, const char *label, double tol);
/* The same for target t's program on the CPU device (NULL: the CPU's). */
tiny_memory tiny_check_compiled_for(sn_graph *g, uint64_t seed, const char *label, double tol,
                                    const sn_target *t);

#endif
