/* plan_cmd.c: `sinter plan`: before anything runs, what a training run needs in device memory
 * and the micro-batch, accumulation and checkpoint policy that fit a budget (train/plan.h); and
 * the training graph that `sinter plan` and `sinter train` both compile. Convention: the numbers
 * printed are the compiled program's, the ones `sinter train --mem` then runs with. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/session.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"
#include "support/memfree.h"
#include "train/plan.h"
#include "cli.h"

/* The model a plan is made for, its adapters (or NULL) and sequence length. */
typedef struct {
    const char *name;
    cli_model m;
    const sn_gpt2_lora *lora;
    bool qlora;               /* the base's linear weights stored as NF4 (the nf4 pass) */
    const char *base;         /* a LoRA or IA3 base's linear weights in 16-bit runs: "bf16" or
                                 "f16" (the base16 pass), "f32" (--base-f32); NULL: neither */
    int T;
} plan_model;

/* The training graph sinter train compiles: the model at B x T with the loss as its one output
 * (training reads no logits). */
static sn_status build(void *ctx, int B, sn_graph **out, sn_err *e) {
    const plan_model *m = ctx;
    *out = sn_graph_new();
    if (!*out) return sn_fail_oom(e, sizeof(sn_graph), "the training graph");
    sn_node *loss;
    sn_status s = cli_model_build(&m->m, m->lora, B, m->T, *out, &loss, e);
    if (s) return s;
    sn_graph_clear_outputs((*out));
    sn_graph_add_output(*out, loss);
    return SN_OK;
}

/* Plans (sn_plan_make) and prints the table to f, or the reason nothing fits to stderr;
 * returns the exit code (1: nothing fits). */
static int plan_run(const plan_model *m, const sn_plan_opts *o, sn_plan *pl, FILE *f) {
    sn_err e;
    sn_status s = sn_plan_make(o, build, (void *)m, pl, &e);
    char b[32];
    char l[96] = "";
    char base[32] = "";
    if (m->base) snprintf(base, sizeof base, " (%s base)", m->base);
    if (m->lora && m->lora->ia3)
        snprintf(l, sizeof l, ", IA3%s", base);
    else if (m->lora)
        snprintf(l, sizeof l, ", %s%s rank %d alpha %g on %s",
                 m->qlora ? "QLoRA (NF4 base)" : "LoRA", base, m->lora->lora.rank,
                 (double)m->lora->lora.alpha, sn_gpt2_lora_targets_name(m->lora->targets));
    fprintf(f, "plan: %s%s, batch %d x seq %d, budget %s, %s, %s\n", m->name, l, o->batch, m->T,
            o->budget ? sn_bytes_str(o->budget, b, sizeof b) : "none",
            o->compile->target ? o->compile->target->name : "cpu",
            sn_precision_name(o->compile->precision));
    if (s) {
        fprintf(stderr, "sinter: %s\n", e.msg);
        return 1;
    }
    sn_plan_print(pl, o->budget, f);
    return 0;
}

typedef struct {
    const char *model, *hf, *tokenizer, *device, *precision, *policy, *offload, *lora_targets;
    long batch, seq, micro, lora, qlora, chunk_logits;
    double lora_alpha;
    bool ia3;
    long long mem;
    bool no_offload;
    bool base_f32;
} plan_args;

#define O(field) offsetof(plan_args, field)

static const cli_opt plan_opts[] = {
    {"model", 'm', CLI_CHOICE, "NAME", O(model), .choices_fn = cli_model_names,
     .help = "the model (or --hf): GPT-2's or the LLaMA family's"},
    {"hf", 0, CLI_STR, "DIR", O(hf),
     .help = "instead of --model: the model a pretrained Hugging Face directory\n"
             "(config.json) or llm.c's .bin describes, with its vocabulary, as\n"
             "sinter train --init-hf DIR builds it"},
    {"tokenizer", 0, CLI_CHOICE, "T", O(tokenizer), .choices = "gpt2, bytes",
     .help = "the vocabulary as sinter train has it: gpt2 50257 (the gpt2\n"
             "models' default), bytes 256 (demo's and tiny's; a LLaMA\n"
             "model's default is its own)"},
    {"batch", 'b', CLI_INT, "B", O(batch), 1, 1 << 16, .help = "sequences per optimizer step (default 16)"},
    {"seq", 't', CLI_INT, "T", O(seq), 1, 1 << 20, .help = "tokens per sequence (default: the model's context)"},
    {"mem", 0, CLI_BYTES, "N", O(mem), .auto_word = true,
     .help = "device memory to fit in: 6GiB, 500MiB, 8e9 (bytes); required;\n"
             "auto: what the device has free now less sinter train --mem auto's\n"
             "reserve (the GPU, or the CPU's available RAM)"},
    {"device", 0, CLI_CHOICE, "D", O(device), .choices = "cpu, cuda",
     .help = "cpu (default) or cuda (sm_80, or with --mem auto this machine's\n"
             "GPU; adds cuBLASLt's workspace)"},
    {"precision", 0, CLI_CHOICE, "P", O(precision), .choices = "auto, fp32, bf16, fp16, tf32",
     .help = "bf16 or fp16 (the autocast pass: fp32 master weights, 16-bit\n"
             "products and the activations it casts), fp32, tf32; auto\n"
             "(default): sinter train's for the device (cuda: bf16 from sm_80,\n"
             "fp16 before; cpu: fp32)"},
    {"micro-batch", 0, CLI_INT, "M", O(micro), 1, 1 << 16,
     .help = "this micro-batch only (default: the largest divisor of B that fits)"},
    {"checkpoint-policy", 0, CLI_CHOICE, "P", O(policy), .choices = "none, block, sqrt, budget",
     .help = "this policy only (default and budget: none when it fits, else the\n"
             "budgeted choice)"},
    {"chunk-logits", 0, CLI_INT, "N", O(chunk_logits), 0, 1 << 30,
     .help = "the LM head and its loss in chunks of N rows (tokens), the logits\n"
             "never whole; 0: whole (default: chunks when nothing fits with them\n"
             "whole, before checkpointing)"},
    {"no-offload", 0, CLI_FLAG, NULL, O(no_offload),
     .help = "never plan the optimizer state in host memory (by default it is\n"
             "when nothing else fits; sinter train --offload optimizer runs it)"},
    {"offload", 0, CLI_CHOICE, "WHAT", O(offload), .choices = "optimizer, none",
     .help = "optimizer: always plan it in host memory; none: as --no-offload"},
    {"lora", 0, CLI_INT, "R", O(lora), 1, 4096,
     .help = "LoRA fine-tuning of rank R (sinter train --lora): the base frozen,\n"
             "no gradients or optimizer state for it"},
    {"qlora", 0, CLI_INT, "R", O(qlora), 1, 4096,
     .help = "QLoRA of rank R: --lora R with the base's linear weights stored\n"
             "as NF4 (0.5 + 1/64 + 1/4096 bytes a weight), each unpacked into a\n"
             "scratch right before its product"},
    {"lora-alpha", 0, CLI_REAL, "ALPHA", O(lora_alpha), 0, 1e6, .lo_open = true,
     .help = "the adapters' scale ALPHA/R (default ALPHA = R)"},
    {"lora-targets", 0, CLI_CHOICE, "T", O(lora_targets), .choices = "attn, mlp, all",
     .help = "the layers adapted (default all)"},
    {"ia3", 0, CLI_FLAG, NULL, O(ia3),
     .help = "IA3 fine-tuning (sinter train --ia3): the base frozen, gradients\n"
             "and optimizer state for the vectors alone"},
    {"base-f32", 0, CLI_FLAG, NULL, O(base_f32),
     .help = "with --lora or --ia3 in bf16 or fp16: the frozen base's linear\n"
             "weights as f32 parameters with 16-bit copies (sinter train\n"
             "--base-f32); by default stored in the compute dtype itself"},
};

/* --mem auto: the device's free bytes less the reserve sinter train --mem auto keeps
 * (api/session.h sn_session_mem_auto); with --device cuda the GPU's own target into *t (its
 * architecture, shared memory and SMs, as sinter train compiles for it). Returns the exit
 * code, -1 when it went well. */
static int mem_auto(bool cuda, sn_target *t, long long *mem) {
    sn_err e;
    int64_t free_b = 0, total = 0;
    sn_status s = SN_OK;
    if (cuda) { /* the GPU answers with a context open: the device for a moment */
        sn_device *d = NULL;
        s = sn_cuda_device_new(0, &d, &e);
        if (!s) s = d->mem_info(d, &free_b, &total, &e);
        if (!s) *t = d->target;
        sn_device_free(d);
    } else if (!sn_host_memory("", &free_b, &total)) { /* the CPU device's mem_info, no device */
        s = sn_fail(&e, SN_ERR_IO, "/proc/meminfo cannot be read");
    }
    if (s) {
        fprintf(stderr, "sinter plan: --mem auto asks the device what it has free: %s; give --mem as "
                "bytes\n", e.msg);
        return 1;
    }
    *mem = sn_session_mem_auto(free_b, cuda);
    char b[32], f[32];
    printf("memory: --mem auto: %s (%lld bytes), the %s (%lld bytes) the device has free less a "
           "reserve\n", sn_bytes_str(*mem, b, sizeof b), *mem, sn_bytes_str(free_b, f, sizeof f),
           (long long)free_b);
    if (*mem > 0) return -1;
    fprintf(stderr, "sinter plan: the device has %s free, less than the reserve: nothing to plan in\n", f);
    return 1;
}

static int cli_plan(int argc, char **argv);

const cli_command cli_plan_cmd = {
    .name = "plan",
    .synopsis = "--model NAME | --hf DIR --mem N [options]",
    .summary = "Plans a training run's memory: what fits in N bytes (sinter train --mem runs it).",
    .opts = CLI_OPTS(plan_opts),
    .notes = "Exit status 1 when nothing fits, naming the smallest budget that would and the\n"
             "largest micro-batch that fits; 2: a usage error.\n",
    .run = cli_plan,
};

static int cli_plan(int argc, char **argv) {
    const cli_command *cmd = &cli_plan_cmd;
    plan_args a = {.device = "cpu", .precision = "auto", .batch = 16, .seq = -1, .chunk_logits = -1};
    int rc = cli_parse(cmd, argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.lora && a.qlora)
        return cli_usage_error(cmd, "--qlora R is --lora R with an NF4 base: give one of them");
    if (a.qlora) a.lora = a.qlora;
    if (!a.lora && (a.lora_alpha > 0 || a.lora_targets)) /* as sinter train refuses them */
        return cli_usage_error(cmd, "--lora-alpha and --lora-targets shape LoRA adapters: add --lora R "
                               "(the rank, e.g. 8)");
    if (a.ia3 && a.lora)
        return cli_usage_error(cmd, "--ia3 and --lora are two ways to fine-tune: choose one");
    if (a.base_f32 && (a.qlora || (!a.lora && !a.ia3))) /* as sinter train refuses it */
        return cli_usage_error(cmd, "--base-f32 keeps the frozen base of --lora or --ia3 in f32: "
                               "add one of them (not --qlora, whose base is NF4)");
    if (!a.model && !a.hf) return cli_usage_error(cmd, "which model? add --model NAME or --hf DIR");
    if (a.model && a.hf) return cli_usage_error(cmd, "--model %s and --hf %s: give one of them", a.model, a.hf);
    if (a.hf && a.tokenizer)
        return cli_usage_error(cmd, "--tokenizer with --hf: the vocabulary is config.json's");
    if (!a.mem) return cli_usage_error(cmd, "how much memory? add --mem N (6GiB, 500MiB)");
    if (a.micro && a.batch % a.micro) return cli_usage_error(cmd, "--micro-batch must divide --batch");
    int offload = SN_PLAN_OFFLOAD_AS_NEEDED;
    if (a.offload) offload = strcmp(a.offload, "none") ? SN_PLAN_OFFLOAD_ALWAYS : SN_PLAN_OFFLOAD_NEVER;
    if (a.no_offload) offload = SN_PLAN_OFFLOAD_NEVER;
    int policy = a.policy ? sn_recompute_policy_parse(a.policy) : -1;
    if (policy == SN_RECOMPUTE_BUDGET) policy = -1;
    sn_target t = strcmp(a.device, "cuda") ? sn_target_cpu() : sn_target_cuda(80);
    if (a.mem < 0 && (rc = mem_auto(!strcmp(a.device, "cuda"), &t, &a.mem)) >= 0) return rc;
    plan_model m = {.name = a.model};
    sn_err e;
    if (!a.hf) {
        cli_model_find(a.model, a.tokenizer, &m.m);
    } else if (cli_model_from_hf(a.hf, &m.m, &e)) {
        fprintf(stderr, "sinter plan: %s\n", e.msg);
        return 1;
    } else {
        m.name = m.m.llama ? m.m.lc.name : m.m.c.name;
    }
    long T = a.seq < 0 ? cli_model_ctx(&m.m) : a.seq;
    m.T = (int)T;
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.target = &t;
    po.precision = !strcmp(a.precision, "auto") ? sn_target_default_precision(&t) /* as the session */
                                                : (sn_precision)sn_precision_parse(a.precision);
    po.nf4 = m.qlora = a.qlora > 0;
    po.base16 = !a.base_f32; /* as the session compiles it */
    bool low = po.precision == SN_PRECISION_BF16 || po.precision == SN_PRECISION_FP16;
    if (low && !m.qlora && (a.lora || a.ia3))
        m.base = a.base_f32 ? "f32" : po.precision == SN_PRECISION_BF16 ? "bf16" : "f16";
    sn_plan_opts o = {.batch = (int)a.batch, .budget = a.mem, .micro_batch = (int)a.micro,
                      .policy = policy, .compile = &po, .offload = offload,
                      .chunk_logits = a.chunk_logits < 0 ? SN_CHUNK_LOGITS_AUTO : a.chunk_logits};
    sn_plan pl;
    unsigned targets = SN_GPT2_LORA_ALL;
    if (a.lora_targets) sn_gpt2_lora_targets_parse(a.lora_targets, &targets);
    sn_gpt2_lora lora = {.lora = {.rank = (int)a.lora,
                                  .alpha = a.lora_alpha > 0 ? (float)a.lora_alpha : (float)a.lora},
                         .targets = targets};
    if (a.ia3) lora = (sn_gpt2_lora){.ia3 = true};
    m.lora = a.lora || a.ia3 ? &lora : NULL;
    return plan_run(&m, &o, &pl, stdout);
}
