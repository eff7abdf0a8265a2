/* train_opts.c: the options of `sinter train` (one table: parse and help) and the checks
 * between them, before any work. Convention: a default lives in train_defaults, a range in the
 * table; what the table cannot say (pairs of options, outputs that are inputs) is checked here
 * after the parse. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/weights.h"
#include "io/hf_llama.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "cli.h"
#include "train_cli.h"

#define O(field) offsetof(train_args, field)
#define STEPS_MAX 100000000

static const cli_opt train_opts[] = {
    {"model", 'm', CLI_CHOICE, "NAME", O(model), .choices_fn = cli_model_names,
     .help = "the GPT-2 or LLaMA-family configuration (default demo)"},
    {"device", 0, CLI_CHOICE, "D", O(device), .choices = "auto, cuda, cpu, interp",
     .help = "auto (default): the CUDA GPU when there is one, else cpu;\n"
             "cuda: CUDA GPU 0 (an error without one; CUDA_VISIBLE_DEVICES=N\n"
             "makes GPU N the first); cpu: compiled kernels on the CPU; interp:\n"
             "the reference interpreter"},
    {"no-cache", 0, CLI_FLAG, NULL, O(no_cache),
     .help = "compile every kernel, read and write no kernel cache\n"
             "($XDG_CACHE_HOME/sinter or ~/.cache/sinter: CUBINs, and object\n"
             "files for the CPU under cpu/)"},
    {"tf32", 0, CLI_FLAG, NULL, O(tf32), .help = "CUDA: TF32 tensor-core GEMMs (sm_80 and newer)"},
    {"precision", 0, CLI_CHOICE, "P", O(precision), .choices = "auto, fp32, bf16, fp16, tf32",
     .help = "bf16 or fp16: products (matmuls, attention) on 16-bit operands\n"
             "with f32 accumulation, f32 master weights, the rest f32 (the\n"
             "autocast pass; fp16 with loss scaling); fp32; tf32: --tf32;\n"
             "auto (default): bf16 on a GPU from sm_80 (A100, RTX 30 and\n"
             "later), fp16 on older ones, fp32 on the CPU; a resumed run\n"
             "keeps its checkpoint's"},
    {"fp8", 0, CLI_CHOICE, "P", O(fp8), .choices = "off, head, linear",
     .help = "products on 8-bit operands (FP8: e4m3, gradients e5m2, each\n"
             "tensor scaled by a power of two; docs/fp8.md): head: the LM\n"
             "head's three; linear: every linear layer's; off (default). Not\n"
             "exact: it trades the operands' mantissa bits for twice the GPU's\n"
             "tensor-core rate (sm_89 and newer); on the CPU it is emulated"},
    {"data", 'd', CLI_STR, "PATH", O(data),
     .help = "text file or directory (default " SN_DEFAULT_CORPUS ")"},
    {"train-bin", 0, CLI_STR, "FILE", O(train_bin),
     .help = "llm.c token shard to train on (with --val-bin; see sinter prepare),\n"
             "or a quoted pattern of many read in name order and concatenated:\n"
             "--train-bin 'data/fineweb_train_*.bin'"},
    {"val-bin", 0, CLI_STR, "FILE", O(val_bin),
     .help = "llm.c token shard, or a quoted pattern of shards, to validate on"},
    {"in-order", 0, CLI_FLAG, NULL, O(in_order),
     .help = "read the training tokens in order, each batch B*T tokens on (as\n"
             "llm.c reads its shards), from the start again at the end; the\n"
             "position is saved in the checkpoint (default: windows at random)"},
    {"tokenizer", 0, CLI_CHOICE, "T", O(tokenizer), .choices = "gpt2, bytes",
     .help = "gpt2: GPT-2's BPE (vocabulary 50257; the default of the gpt2\n"
             "models, from the assets installed with sinter); bytes: one token\n"
             "a byte (vocabulary 256; the default of demo and tiny)"},
    {"bpe", 0, CLI_STR, "DIR", O(bpe),
     .help = "GPT-2 BPE from DIR/encoder.json and DIR/vocab.bpe (--tokenizer gpt2\n"
             "from other files)"},
    {"tokenizer-file", 0, CLI_STR, "FILE", O(tokenizer_file),
     .help = "a Hugging Face tokenizer.json (a BPE: GPT-2's, SmolLM's,\n"
             "Llama 3's, TinyLlama's byte fallback); the model's vocabulary is its size"},
    {"steps", 's', CLI_INT, "N", O(steps), 1, STEPS_MAX, .help = "optimizer steps (default 600)"},
    {"batch", 'b', CLI_INT, "B", O(batch), 1, 1 << 16, .help = "sequences per micro-batch (default 16)"},
    {"seq", 't', CLI_INT, "T", O(seq), 1, 1 << 20,
     .help = "tokens per sequence (default: the model's context)"},
    {"tokens-per-step", 0, CLI_INT, "N", O(tokens_per_step), 1, (double)(1LL << 40),
     .help = "tokens per optimizer step, a multiple of B*T: gradients of N/(B*T)\n"
             "micro-batches are averaged (default B*T)"},
    {"lr", 0, CLI_REAL, "X", O(lr), 0, 10, .lo_open = true, .help = "peak learning rate (default 3e-3)"},
    {"warmup", 0, CLI_INT, "N", O(warmup), 0, STEPS_MAX,
     .help = "linear warm-up steps (default 10% of --steps)"},
    {"weight-decay", 0, CLI_REAL, "X", O(weight_decay), 0, 10,
     .help = "AdamW's decoupled weight decay on matrices (default 0.1)"},
    {"beta1", 0, CLI_REAL, "X", O(beta1), 0, 1, .help = "AdamW's first moment decay (default 0.9)"},
    {"beta2", 0, CLI_REAL, "X", O(beta2), 0, 1, .help = "AdamW's second moment decay (default 0.95)"},
    {"grad-clip", 0, CLI_REAL, "X", O(grad_clip), 0, 1e6,
     .help = "cap of the gradients' global norm (default 1.0; 0: no clipping)"},
    {"min-lr-frac", 0, CLI_REAL, "X", O(min_lr_frac), 0, 1.01,
     .help = "the cosine schedule ends at lr times this (default 0.1; 1: no decay)"},
    {"dropout", 0, CLI_REAL, "P", O(dropout), 0, 1,
     .help = "GPT-2's dropout probability in training (nanoGPT's places: the\n"
             "embeddings' sum, the attention output projection and the MLP output\n"
             "before each residual add; default 0: off; none in validation and\n"
             "samples; attention-probability dropout is not supported)"},
    {"diverge-nats", 0, CLI_REAL, "X", O(diverge_nats), 0, 1e6,
     .help = "stop when a step's loss is more than X nats above the median of\n"
             "the last 50 steps' (default 4; 0: never; from the second step).\n"
             "A NaN or infinite loss or gradient norm always stops the run"},
    {"seed", 0, CLI_INT, "N", O(seed), 0, 0x7fffffff,
     .help = "initialisation, data and sampling seed (default 1337)"},
    {"eval-every", 0, CLI_INT, "N", O(eval_every), 0, STEPS_MAX,
     .help = "validation every N steps (default 100; 0: only at the end)"},
    {"log", 0, CLI_STR, "FILE", O(log),
     .help = "write step,loss,val_loss,lr,grad_norm,tokens_per_s as CSV, or as one\n"
             "JSON object a line when FILE ends in .jsonl"},
    {"plot", 0, CLI_STR, "FILE.png", O(plot),
     .help = "draw the train and validation loss curves (at each validation)"},
    {"checkpoint", 'c', CLI_STR, "FILE", O(checkpoint),
     .help = "save the whole run every --save-every steps and at the end"},
    {"save-every", 0, CLI_INT, "N", O(save_every), 0, STEPS_MAX, .help = "(default 100; 0: only at the end)"},
    {"resume", 'r', CLI_STR, "FILE", O(resume),
     .help = "continue the run saved in FILE exactly (same model, data and\n"
             "options); saves go on to FILE unless --checkpoint says otherwise"},
    {"init", 0, CLI_STR, "FILE", O(init),
     .help = "start a new run (fresh optimizer, step 0, this run's data and\n"
             "options) from the model weights in checkpoint FILE, written by\n"
             "--checkpoint of any run of the same --model (docs/finetune.md)"},
    {"init-hf", 0, CLI_STR, "PATH", O(init_hf),
     .help = "start a new run from pretrained weights: a Hugging Face GPT-2,\n"
             "LLaMA or Qwen2 directory (config.json and model.safetensors, or a\n"
             "sharded model.safetensors.index.json) or llm.c's gpt2_124M.bin; the model's\n"
             "shape is the file's (--model is not used; the tokenizer defaults to\n"
             "a LLaMA directory's tokenizer.json, else GPT-2's when its vocabulary\n"
             "is 50257)"},
    {"lora", 0, CLI_INT, "R", O(lora), 1, 4096,
     .help = "LoRA fine-tuning: beside each targeted layer's x @ w, a path\n"
             "(x @ A) @ B * alpha/R with A (in, R) random and B (R, out) zeros, so\n"
             "step 0 is the base model; only A and B train, every other weight\n"
             "(embeddings, layer norms, biases too) is frozen"},
    {"qlora", 0, CLI_INT, "R", O(qlora), 1, 4096,
     .help = "QLoRA: --lora R over a base whose linear weights are stored as NF4\n"
             "(4 bits and double-quantized scales: 0.52 bytes a weight), drawn or\n"
             "read (--init, --init-hf) in full precision and quantized; its\n"
             "products in 16 bits on a GPU (--precision auto), on the CPU with\n"
             "--precision bf16 (docs/finetune.md)"},
    {"lora-alpha", 0, CLI_REAL, "ALPHA", O(lora_alpha), 0, 1e6, .lo_open = true,
     .help = "the path's scale is ALPHA/R (default ALPHA = R: scale 1; keep\n"
             "ALPHA fixed when comparing ranks, as the LoRA paper does)"},
    {"lora-targets", 0, CLI_CHOICE, "T", O(lora_targets), .choices = "attn, mlp, all",
     .help = "all (default), attn or mlp: GPT-2's c_attn and c_proj, c_fc and\n"
             "c_proj; the LLaMA family's q, k, v, o_proj, gate, up, down_proj"},
    {"ia3", 0, CLI_FLAG, NULL, O(ia3),
     .help = "(IA)^3 fine-tuning: learned vectors, ones at first, scale each\n"
             "layer's keys, values and the MLP's inner activation channel by\n"
             "channel; only they train, every weight is frozen (not with --lora)"},
    {"base-f32", 0, CLI_FLAG, NULL, O(base_f32),
     .help = "with --lora or --ia3 in bf16 or fp16: keep the frozen base's\n"
             "linear weights as f32 parameters, each with its 16-bit copy (6\n"
             "bytes a weight); by default they are stored in the compute dtype\n"
             "itself (2 bytes a weight, the same losses bit for bit)"},
    {"sample-len", 0, CLI_INT, "N", O(sample_len), 0, 1 << 20,
     .help = "tokens to generate after training (default 200; 0: no samples);\n"
             "a sample that fits the context decodes over a KV cache (not\n"
             "with --mem: then the whole window per token)"},
    {"sample-every", 0, CLI_INT, "N", O(sample_every), 0, STEPS_MAX,
     .help = "also sample every N steps (default 0: only at the end)"},
    {"prompt", 0, CLI_STR, "TEXT", O(prompt),
     .help = "the samples' prompt (default: the validation text's first token)"},
    {"temperature", 0, CLI_REAL, "X", O(temperature), 0, 100,
     .help = "sampling temperature (default 1.0; 0: greedy)"},
    {"top-k", 0, CLI_INT, "K", O(top_k), 0, 1 << 24,
     .help = "sample among the K most likely tokens (default 40; 0: all)"},
    {"top-p", 0, CLI_REAL, "P", O(top_p), 0, 1, .lo_open = true, .hi_closed = true,
     .help = "then among the fewest likeliest tokens holding P of the\n"
             "probability (nucleus sampling; default 1: all of them)"},
    {"checkpoint-policy", 0, CLI_CHOICE, "P", O(policy), .choices = "none, block, sqrt",
     .help = "recompute activations in the backward instead of keeping them:\n"
             "none (default), block (keep transformer block inputs), sqrt (Chen\n"
             "et al.: every sqrt(n)-th sub-block boundary); --mem chooses for itself"},
    {"mem", 0, CLI_BYTES, "N", O(mem), .auto_word = true,
     .help = "fit the run in N bytes of device memory (6GiB, 500MiB): --batch is\n"
             "then the sequences per step, and the plan (sinter plan) picks the\n"
             "micro-batch, accumulation steps and checkpointing; the planned and\n"
             "measured memory are printed after the first step; it offloads\n"
             "the optimizer state when nothing fits without; auto: the device's\n"
             "free memory at the start less a reserve (a GPU: 5%, at least\n"
             "256 MiB; the CPU: 10% of the available RAM, at least 1 GiB)"},
    {"chunk-logits", 0, CLI_INT, "N", O(chunk_logits), 0, 1 << 30,
     .help = "the LM head and its loss in chunks of N rows (tokens), the logits\n"
             "never whole; 0: whole (default; with --mem: chunks when the plan\n"
             "does not fit with them whole)"},
    {"offload", 0, CLI_CHOICE, "WHAT", O(offload_what), .choices = "optimizer, none",
     .help = "optimizer: AdamW's moments, gradient sums and fp32 master weights in\n"
             "host memory, updated there by the CPU (the device keeps weights,\n"
             "gradients and activations); none: on the device (default without\n"
             "--mem)"},
    {"offload-delay", 0, CLI_FLAG, NULL, O(offload_delay),
     .help = "with --offload optimizer: the CPU's AdamW of a step runs while the\n"
             "device runs the next step, which reads the weights one update old\n"
             "(DeepSpeed's delayed parameter update: other numbers than without\n"
             "it; evaluations, samples and checkpoints see every update)"},
    {"offload-threads", 0, CLI_INT, "N", O(offload_threads), 1, 4096,
     .help = "with --offload-delay on a GPU: the CPU threads of its AdamW (default\n"
             "the cores less one, left to the thread that drives the GPU)"},
    {"dump-after", 0, CLI_CHOICE, "PASS", O(dump_after), .choices_fn = sn_pipeline_pass_names,
     .help = "print the IR (or, after fuse and memplan, the program) the trainer\n"
             "runs, after PASS"},
    {"overwrite", 0, CLI_FLAG, NULL, O(overwrite),
     .help = "let --checkpoint, --log and --plot replace an existing file that\n"
             "is not a checkpoint, a CSV log or a PNG (refused by default)"},
};

const cli_command cli_train_cmd = {
    .name = "train",
    .synopsis = "[options]",
    .summary = "Trains a GPT on a text corpus or on llm.c token shards.",
    .opts = CLI_OPTS(train_opts),
    .notes =
        "Every output path is checked writable before training and every file is replaced whole,\n"
        "keeping its mode; an output that is a symbolic link replaces the file it names. An output\n"
        "may not be an input or another output (compared as files, not names).\n"
        "--train-bin and --val-bin take a file, or a glob(3) pattern (* ? [...]) when no file has\n"
        "that name: its matches are read in byte order of their names, concatenated, and held in\n"
        "memory (2 bytes a token; a 10B-token FineWeb sample needs 20 GB); a resume checks every\n"
        "shard (their count, tokens and hash).\n"
        "SIGINT or SIGTERM: the current step finishes, a checkpoint is saved when --checkpoint (or\n"
        "--resume) is given, and sinter exits with status 130 (SIGINT) or 143 (SIGTERM); a second\n"
        "signal stops at once without saving. Exit status 2: a usage error; 1: a failure (the\n"
        "message says which).\n",
    .run = cli_train,
};

int train_parse(int argc, char **argv, train_args *a, char bpe_dir[4096]) {
    const cli_command *cmd = &cli_train_cmd;
    *a = (train_args){.model = "demo", .device = "auto", .data = SN_DEFAULT_CORPUS, .steps = 600, .batch = 16,
                      .seq = -1, .seed = 1337, .eval_every = 100, .lr = 3e-3, .save_every = 100,
                      .sample_len = 200, .top_k = 40, .temperature = 1.0, .top_p = 1.0, .checkpoint_policy = -1,
                      .chunk_logits = -1, .precision = "auto", .diverge_nats = 4, .offload = -1, .warmup = -1,
                      .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .grad_clip = 1.0,
                      .min_lr_frac = 0.1};
    int rc = cli_parse(cmd, argc, argv, a);
    if (rc >= 0) return rc;
    if (a->policy) a->checkpoint_policy = sn_recompute_policy_parse(a->policy);
    if (a->offload_what) a->offload = !strcmp(a->offload_what, "optimizer");
    if (!a->train_bin != !a->val_bin)
        return cli_usage_error(cmd, "token shards come in pairs: give both --train-bin and --val-bin");
    if (a->resume && !a->checkpoint) a->checkpoint = a->resume;
    if (a->qlora && a->lora)
        return cli_usage_error(cmd, "--qlora R is --lora R over an NF4 base: give one of them");
    if (a->qlora && a->ia3)
        return cli_usage_error(cmd, "--qlora trains LoRA adapters over an NF4 base, --ia3 IA3 "
                               "vectors: choose one");
    if (a->base_f32 && a->qlora)
        return cli_usage_error(cmd, "--base-f32 keeps a LoRA or IA3 base in f32; --qlora stores it "
                               "as NF4: give one of them");
    if (a->base_f32 && !a->lora && !a->ia3)
        return cli_usage_error(cmd, "--base-f32 keeps the frozen base of --lora or --ia3 in f32: "
                               "add one of them (a full fine-tuning run has no frozen base)");
    if (a->qlora) a->lora = a->qlora; /* the adapters: --lora's (train_cmd.c adds the nf4 pass) */
    if (!a->lora && (a->lora_alpha > 0 || a->lora_targets))
        return cli_usage_error(cmd, "--lora-alpha and --lora-targets shape LoRA adapters: add --lora R "
                               "(the rank, e.g. 8)");
    if (a->ia3 && a->lora)
        return cli_usage_error(cmd, "--ia3 and --lora are two ways to fine-tune: choose one");
    if (a->mem && a->tokens_per_step)
        return cli_usage_error(cmd, "--mem chooses the micro-batches itself: give the sequences per "
                               "step as --batch, not --tokens-per-step");
    if (a->offload == 1 && !strcmp(a->device, "interp"))
        return cli_usage_error(cmd, "--offload optimizer moves the optimizer state off a device; the "
                               "interpreter has none (use --device cpu or cuda)");
    if (a->offload_delay && a->offload != 1)
        return cli_usage_error(cmd, "--offload-delay overlaps the CPU's AdamW with the device's next "
                               "step: add --offload optimizer");
    if (a->offload_threads && !a->offload_delay)
        return cli_usage_error(cmd, "--offload-threads sets the delayed update's CPU threads: add "
                               "--offload-delay (and --offload optimizer)");
    if (a->mem && !strcmp(a->device, "interp"))
        return cli_usage_error(cmd, "--mem plans device memory; the interpreter has none (use "
                               "--device cpu)");
    if (!strcmp(a->precision, "tf32")) a->tf32 = true;
    else if (a->tf32 && !strcmp(a->precision, "auto")) a->precision = "tf32"; /* asked for f32 products */
    sn_gpt2_config c = {0};
    sn_llama_config lc;
    static char hf_tokenizer[4200];
    if (a->init_hf && sn_hf_is_llama(a->init_hf)) { /* its vocabulary chooses the tokenizer */
        /* and its own tokenizer.json, when it has one and no tokenizer was asked for */
        snprintf(hf_tokenizer, sizeof hf_tokenizer, "%s/tokenizer.json", a->init_hf);
        if (!a->tokenizer_file && !a->tokenizer && !a->bpe && access(hf_tokenizer, R_OK) == 0)
            a->tokenizer_file = hf_tokenizer;
        sn_err e = {0};
        if (sn_hf_llama_read_config(a->init_hf, &lc, &e)) {
            fprintf(stderr, "sinter train: --init-hf %s: %s\n", a->init_hf, e.msg);
            return 1;
        }
        c.name = lc.name;
        c.vocab = lc.vocab;
    } else if (!a->init_hf && sn_llama_config_find(a->model, &lc)) {
        c.name = lc.name;
        c.vocab = lc.vocab;
    } else if (a->init_hf) { /* issue 23: the pretrained file's shape, and so its tokenizer */
        sn_err e = {0};
        if (sn_weights_read_config(a->init_hf, &c, &e)) {
            fprintf(stderr, "sinter train: --init-hf %s: %s\n", a->init_hf, e.msg);
            return 1;
        }
    } else {
        sn_gpt2_config_find(a->model, &c); /* the table checked the name */
    }
    if (a->tokenizer_file && (a->tokenizer || a->bpe))
        return cli_usage_error(cmd, "--tokenizer-file is the run's tokenizer: leave out %s",
                               a->tokenizer ? "--tokenizer" : "--bpe");
    if (!a->tokenizer_file && (rc = cli_tokenizer(cmd, &c, a->tokenizer, a->bpe, bpe_dir, &a->bpe)))
        return rc;
    /* no output may be an input or another output: checked before anything is read */
    char enc[4200] = "", merges[4200] = "";
    if (a->bpe) {
        snprintf(enc, sizeof enc, "%s/encoder.json", a->bpe);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", a->bpe);
    }
    const cli_path paths[] = {
        {"--checkpoint", a->checkpoint, "checkpoint", true, "--resume"},
        {"--log", a->log, "log", true, NULL},
        {"--plot", a->plot, "plot", true, NULL},
        {"--data", a->train_bin ? NULL : a->data, "training corpus", false, NULL},
        {"--train-bin", a->train_bin, "training shard", false, NULL},
        {"--val-bin", a->val_bin, "validation shard", false, NULL},
        {"--bpe", a->bpe ? enc : NULL, "tokenizer's encoder.json", false, NULL},
        {"--bpe", a->bpe ? merges : NULL, "tokenizer's vocab.bpe", false, NULL},
        {"--tokenizer-file", a->tokenizer_file, "tokenizer", false, NULL},
        {"--resume", a->resume, "checkpoint resumed", false, "--checkpoint"},
        {"--init", a->init, "checkpoint the run starts from", false, NULL},
        {"--init-hf", a->init_hf, "pretrained model the run starts from", false, NULL},
    };
    int n_paths = (int)(sizeof paths / sizeof paths[0]);
    rc = cli_check_paths("train", paths, n_paths);
    for (int i = 0; i < n_paths && !rc; i++) /* --train-bin and --val-bin may be patterns */
        if (strstr(paths[i].opt, "-bin")) rc = cli_check_pattern("train", &paths[i], paths, n_paths);
    if (rc) return rc;
    if (a->dump_after && !strcmp(a->device, "interp") &&
        (!strcmp(a->dump_after, "fuse") || !strcmp(a->dump_after, "memplan")))
        return cli_usage_error(cmd, "--dump-after %s shows the compiled program, and --device interp "
                               "compiles none (use --device cpu)", a->dump_after);
    return -1; /* go on */
}
