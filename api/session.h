/* session.h: training a language model written against the graph API, in one object: the data
 * (a text corpus or llm.c token shards), the device, the compiled step, validation, checkpoints
 * and samples. Convention: the model is a function that builds its forward graph for any batch
 * shape; the session calls it for training (B, T) and for sampling (1, T), and owns the rest.
 * Every type here is opaque or plain data: this header and frontend/sinter.h are the installed API.
 *
 *     sn_model m = {.name = "mine", .ctx = 128, .build = build_mine};
 *     sn_session_opts o = sn_session_defaults();
 *     o.data = "shakespeare.txt"; o.steps = 500;
 *     sn_session *s;
 *     if (sn_session_new(&m, &o, &s, &e)) ...
 *     for (int i = 0; i < o.steps; i++) sn_session_step(s, &st, &e);
 *     sn_session_validate(s, &val, &e);  sn_session_save(s, "run.ckpt", &e);
 */
#ifndef SN_SESSION_H
#define SN_SESSION_H

#include <stdio.h>

#include "base/graph.h"

/* The most micro-batches one optimizer step accumulates (--tokens-per-step / (B x T)). */
#define SN_SESSION_MAX_MICRO (1 << 20)

/* A model: builds its forward graph into g for batches of B sequences of T tokens (T <= ctx)
 * over a vocabulary of V ids (the tokenizer's): the inputs sn_input_tokens and
 * sn_input_targets, both (B, T) and named as the model likes; the logits (B, T, Vp >= V,
 * padding allowed) given to sn_graph_set_logits; the mean cross-entropy given to
 * sn_graph_set_loss. Parameters are matched by name between the two graphs the session
 * builds, so the same names must come out for every B and T. */
typedef struct {
    const char *name; /* in messages and checkpoints: "llama-mini" */
    const char *desc; /* its shape in words ("4 layers, 128 channels"), checked on resume; may be NULL */
    const char *config; /* the checkpoints' "model.config": what rebuilds a shape no name holds
                           (sn_llama_config_format), checked on resume; may be NULL */
    int ctx;          /* the longest sequence it takes: the default seq */
    sn_status (*build)(sn_graph *g, int B, int T, int V, void *user, sn_err *e);
    void *user;       /* passed to build (and to build_kv) */
    /* Optional (NULL: samples recompute the whole window per token): the same model's
     * generation graphs over vocabulary V, prefill (decode false) or decode, as
     * train/generate.h describes them (its n_layer layers' keys and values, then the logits),
     * with the training graph's parameter names and shapes. sn_session_sample then prefills
     * the prompt once and decodes each new token over a KV cache, in fp32, when the prompt fits
     * the training length T, the run has no memory plan (mem) and no NF4 base; past T the
     * window slides by T/2 (train/generate.h). */
    sn_status (*build_kv)(sn_graph *g, int B, int T, int V, bool decode, void *user, sn_err *e);
    int n_layer;      /* with build_kv: its layers */
} sn_model;

/* What runs the steps. */
typedef enum {
    SN_DEVICE_AUTO,   /* the CUDA GPU when the driver reports one, else the CPU (saying why in one
                         line on stdout) */
    SN_DEVICE_CUDA,   /* the first CUDA GPU; an error without one */
    SN_DEVICE_CPU,    /* the CPU: kernels compiled by LLVM, GEMMs by oneDNN */
    SN_DEVICE_INTERP, /* the reference interpreter (slow, exact: for tests) */
    SN_DEVICE_COUNT
} sn_device_kind;

/* Activation checkpointing: which activations the backward recomputes instead of keeping. */
typedef enum {
    SN_CHECKPOINT_AUTO,  /* none; with mem, the plan's choice */
    SN_CHECKPOINT_NONE,  /* keep every activation */
    SN_CHECKPOINT_BLOCK, /* keep each transformer block's input, recompute the rest */
    SN_CHECKPOINT_SQRT,  /* keep every sqrt(n)-th sub-block boundary */
    SN_CHECKPOINT_COUNT
} sn_checkpoint_policy;

/* Where AdamW's moments, the gradient sums and the fp32 master weights live (ZeRO-Offload). */
typedef enum {
    SN_OFFLOAD_AUTO,      /* on the device; with mem, the plan's choice (host when nothing fits) */
    SN_OFFLOAD_NONE,      /* on the device */
    SN_OFFLOAD_OPTIMIZER, /* in host memory, updated there by the CPU */
    SN_OFFLOAD_COUNT
} sn_offload;

/* The zero of each enum above is its AUTO (and precision's fp32): a zeroed field is the default. */
typedef struct {
    sn_device_kind device;
    bool tf32, no_cache;  /* CUDA: TF32 GEMMs for the f32 products (SN_PRECISION_TF32 sets it);
                             CUDA and CPU: compile without the kernel cache */
    const char *data;     /* a text file or directory, split 90/10 into train and validation */
    const char *train_bin, *val_bin; /* instead of data: llm.c token shards, each a path or a glob(3)
                                        pattern of several read in name order (sn_shards_read) */
    bool data_in_order;   /* read the training tokens in order (as llm.c reads its shards),
                             each batch B*T tokens on, again from the start at the end, the
                             position in the checkpoint; false: windows at random starts */
    const char *bpe;      /* GPT-2 BPE from DIR/encoder.json and DIR/vocab.bpe; NULL: bytes */
    const char *tokenizer_file; /* instead of bpe: a Hugging Face tokenizer.json (a byte-level
                             BPE: data.h sn_tokenizer_hf_load); checkpoints record its hash */
    int batch;            /* B, sequences per micro-batch */
    int seq;              /* T, tokens per sequence; 0: the model's ctx */
    long tokens_per_step; /* a multiple of B*T: that many tokens per optimizer step (at most
                           * SN_SESSION_MAX_MICRO micro-batches); 0: B*T */
    int steps;            /* optimizer steps of the run (the learning-rate schedule's length) */
    double lr;            /* peak learning rate (AdamW, cosine, 10% warm-up) */
    uint64_t seed;        /* initialisation, batches and samples */
    int val_batches;      /* batches of (B, T) one sn_session_validate reads, at most (0: 8) */
    const char *resume;   /* a checkpoint of the same model, data and options to go on from */
    const char *init;     /* a new run (fresh optimizer, step 0) from the weights of a checkpoint
                             of the same model, saved by any run; the model's LoRA adapters
                             (frontend/lora.h) or IA3 vectors (frontend/ia3.h) the file lacks
                             keep their initialisation. Not
                             read with resume (the resumed checkpoint holds every weight) */
    const char *dump_after; /* print the IR or program after this pass (sinter train --help) */
    sn_checkpoint_policy checkpoint_policy;
    int64_t mem;          /* device bytes to fit the run in (0: no plan): batch is then the
                             sequences per step, and the planner (sinter plan) picks the
                             micro-batch, the accumulation steps and the checkpointing;
                             SN_SESSION_MEM_AUTO: the device's free memory when the run starts
                             less a reserve (sn_session_mem_auto) */
    sn_precision precision; /* base/graph.h: bf16 and fp16 run the autocast pass (fp16 with
                               dynamic loss scaling) */
    bool precision_auto;  /* precision chosen for the device instead (sinter train's default):
                             program/target.h sn_target_default_precision (bf16 on a GPU from
                             sm_80, fp16 before, fp32 on the CPU and the interpreter); with
                             resume, the checkpoint's */
    sn_offload offload;
    bool offload_delay;   /* with offload SN_OFFLOAD_OPTIMIZER: the delayed parameter update
                             (train.h sn_train_opts.offload_delay: the steps read the weights
                             one update old; validation, samples and saves see every update);
                             refused with any other offload */
    int offload_threads;  /* with offload_delay: the host AdamW's threads (train.h
                             sn_train_opts.offload_threads; 0: the cores less one) */
    int64_t chunk_logits; /* the LM head and its loss in chunks of this many rows (tokens), the
                             logits never whole (passes.h: the chunk_logits pass); 0: whole;
                             -1 (the default): whole, or with mem in chunks when the plan does
                             not fit with them whole */
    int fp8;              /* an sn_fp8_policy (passes/passes.h): 0 off, 1 the LM head's
                             products, 2 every linear layer's on 8-bit operands (the fp8 pass);
                             saved in the checkpoint and checked on resume */
    const char *init_pretrained; /* a new run from pretrained GPT-2 weights: a Hugging Face
                             directory (config.json, model.safetensors) or llm.c's .bin
                             (io/weights.h); the model must be the GPT-2 they describe, with the
                             tokenizer's vocabulary; its LoRA adapters and IA3 vectors keep
                             their initialisation.
                             Not with init; not read with resume */
    bool nf4;             /* QLoRA: the model's frozen linear weights (a LoRA base) stored as
                             NF4 (passes.h: the nf4 pass), drawn by their init rule or read from
                             init / init_pretrained in full precision and quantized; checkpoints
                             keep the packed bytes, and resume needs a run with nf4 alike */
    bool base_f32;        /* LoRA's and IA3's frozen linear weights kept as f32 parameters in
                             bf16 and fp16 runs (each with its 16-bit weight shadow, 6 bytes a
                             weight); false (the default): stored in the compute dtype itself
                             (passes.h: the base16 pass), 2 bytes a weight, the losses the same
                             bit for bit; checkpoints hold f32 weights either way */
    /* The optimizer's knobs (sn_session_defaults gives train/train.h's defaults); saved in the
     * checkpoint and checked on resume like the rest. */
    int warmup;           /* linear warm-up steps, at most steps; -1: 10% of the steps */
    double weight_decay;  /* AdamW's decoupled decay, on parameters of rank >= 2; >= 0 */
    double beta1, beta2;  /* AdamW's moment decays, in [0, 1) */
    double grad_clip;     /* the cap of the gradients' global norm; 0: none */
    double min_lr_frac;   /* the cosine schedule ends at lr * min_lr_frac, in [0, 1] */
} sn_session_opts;

/* sn_session_opts.mem: fit the run in the device memory free when it starts. */
#define SN_SESSION_MEM_AUTO ((int64_t)-1)
/* The budget SN_SESSION_MEM_AUTO gives a device with free_bytes free: the free bytes less a
 * reserve for what no plan counts (on a GPU the modules' code, the driver's and cuBLASLt's own
 * allocations, the pages each allocation rounds up to; on the host the corpus, the compiler and
 * everything else the process and the machine keep): on CUDA the larger of 256 MiB and 5% of
 * the free bytes, on the host the larger of 1 GiB and 10%; 0 when nothing is left. */
int64_t sn_session_mem_auto(int64_t free_bytes, bool cuda);

/* device auto, fp32, the default corpus, B 16, T the model's, 600 steps, lr 3e-3, seed 1337,
 * 8 validation batches, checkpointing and offload auto, no memory plan; warm-up 10% of the
 * steps, weight decay 0.1, betas (0.9, 0.95), clip 1.0, min_lr_frac 0.1. */
sn_session_opts sn_session_defaults(void);

typedef struct sn_session sn_session;

/* Loads the data, builds and compiles the model for the device, initialises (or, with resume,
 * restores) the parameters and the optimizer. A model that does not build, data that cannot be
 * read, a checkpoint of another run: a status and a message that names what to change. */
sn_status sn_session_new(const sn_model *m, const sn_session_opts *o, sn_session **out, sn_err *e);
void sn_session_free(sn_session *s);

typedef struct {
    int step;           /* optimizer steps taken, this one included */
    double loss;        /* mean training loss of the step's micro-batches, before the update */
    double grad_norm;   /* before clipping */
    float lr;
    bool skipped;       /* fp16: the gradients overflowed, no update, the loss scale halved */
    float loss_scale;   /* the loss scale the step ran with (1 without loss scaling) */
} sn_session_step_stats;

/* One optimizer step on batches drawn at random from the training tokens. A diverged run
 * (NaN or infinite loss or gradient) is SN_ERR_NUMERIC and leaves the parameters as they were.
 * Signals: on the CPU device the calling thread runs part of every GEMM, some in oneDNN's JIT
 * sgemm, which (libdnnl before 3.11) points rsp at a heap workspace: a signal handler run on
 * this thread meanwhile pushes its frame over the heap. Block the signals you handle in the
 * thread that steps (take them with sigwait on another, as `sinter train` does) or install the
 * handler with SA_ONSTACK on an alternate stack. sinter's own worker threads block them. */
sn_status sn_session_step(sn_session *s, sn_session_step_stats *st, sn_err *e);
/* The mean loss over the first val_batches validation batches, recorded in the run's
 * validation curve at the current step (checkpoints carry the curves). With a stop flag set
 * (sn_session_set_stop) and raised before the last batch, it stops between batches: *loss is
 * then -1 and nothing is recorded. */
sn_status sn_session_validate(sn_session *s, double *loss, sn_err *e);
/* A flag (read atomically; NULL: none) that a signal handler or another thread raises to make
 * the long calls that loop over batches (sn_session_validate) stop early; a step is never cut. */
void sn_session_set_stop(sn_session *s, const int *stop);
/* Saves the whole run (weights, moments, step, data RNG, curves) to path, atomically; resuming
 * it with the same options repeats the same losses bit for bit. */
sn_status sn_session_save(sn_session *s, const char *path, sn_err *e);
/* Draws the training and validation curves into a PNG. */
sn_status sn_session_plot(const sn_session *s, const char *path, const char *title, sn_err *e);

typedef struct {
    const char *prompt; /* NULL or "": the validation text's first token */
    int n_new;          /* tokens to generate */
    float temperature;  /* <= 0: greedy */
    int top_k;          /* 0: all ids */
    float top_p;        /* the nucleus: the fewest likeliest ids holding this much of the
                           probability (after top_k); 0 or >= 1: all */
    uint64_t seed;      /* the same seed and weights give the same text */
} sn_session_sample_opts;

/* Generates o->n_new tokens after the prompt with the current weights (a batch-1 copy of the
 * model compiled at the first call: with the model's build_kv, its generation programs and KV
 * cache; else its forward at the training length T, run once per token over the last T
 * tokens) and decodes prompt and sample into *text (malloc'd, NUL-terminated, *len bytes; the
 * caller frees it). Either way the same seed and logits give the same tokens; the two differ by
 * their arithmetic (the cache's is fp32) and past T (the cache's window slides by T/2). */
sn_status sn_session_sample(sn_session *s, const sn_session_sample_opts *o, char **text,
                            size_t *len, sn_err *e);

typedef struct {
    const char *model, *tokenizer, *device; /* names; device: what runs the steps */
    int cuda_sm;                            /* a CUDA device's architecture (86: sm_86); 0 else */
    int vocab, batch, seq, micro;           /* micro: micro-batches of (B, T) per step */
    long tokens_per_step;
    int64_t params;                         /* trained and frozen elements */
    int64_t trained;                        /* the trained ones (not frozen) */
    int init_fresh;                         /* with init: adapters the file lacked (initialised) */
    size_t train_tokens, val_tokens;
    int train_shards, val_shards;           /* the llm.c shards read; 0: a text corpus */
    int step, steps;                        /* taken so far (a resumed run starts later) */
    /* With mem: the plan's device bytes, and after a step the device's own count of the same
     * (arena peak + persistent block + optimizer state + workspace + the evaluation program's
     * own block and arena, sn_plan.eval); zeros otherwise. */
    int64_t mem_planned, mem_measured;
    int64_t mem_budget;                     /* with mem: the bytes the plan fits in (mem, or
                                               what SN_SESSION_MEM_AUTO found) */
    int64_t mem_free;                       /* with SN_SESSION_MEM_AUTO: the device's free
                                               bytes it started from; else 0 */
    bool offload;                           /* the optimizer state is in host memory: */
    int64_t host_planned, host_measured;    /* its bytes (planned only with mem; measured always) */
    sn_precision precision;                 /* the run's (precision_auto: the one chosen) */
    int fp8_products;                       /* products on 8-bit operands (the fp8 pass) */
    bool loss_scaling;                      /* fp16: dynamic loss scaling; then its state: */
    float loss_scale;                       /* the scale the next step runs with */
    int64_t steps_skipped;                  /* steps skipped for overflowed gradients so far */
} sn_session_info;
void sn_session_info_get(const sn_session *s, sn_session_info *out);
/* With mem: the plan the run follows as a table (weights ... total, the choice); else nothing. */
void sn_session_plan_print(const sn_session *s, FILE *f);

#endif
