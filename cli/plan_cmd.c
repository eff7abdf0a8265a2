/* plan_cmd.c: `sinter plan`: before anything runs, what a training run needs in device memory
 * and the micro-batch, accumulation and checkpoint policy that fit a budget (train/plan.h); and
 * the training graph that `sinter plan` and `sinter train` both compile. Convention: the numbers
 * printed are the compiled program's, the ones `sinter train --mem` then runs with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/passes.h"
#include "train/plan.h"
#include "cli.h"

static const char plan_usage[] =
    "usage: sinter plan --model NAME --batch B --seq T --mem N [options]\n"
    "  --model NAME          gpt2, gpt2-medium, gpt2-large, gpt2-xl, demo, tiny\n"
    "  --batch B             sequences per optimizer step (default 16)\n"
    "  --seq T               tokens per sequence (default: the model's context)\n"
    "  --mem N               device memory to fit in: 6GiB, 500MiB, 8e9 (bytes)\n"
    "  --device D            cpu (default) or cuda (adds cuBLASLt's workspace)\n"
    "  --precision P         fp32 (default), bf16 or fp16 (the autocast pass: fp32 master\n"
    "                        weights, 16-bit products and the activations it casts), tf32\n"
    "  --micro-batch M       this micro-batch only (default: the largest divisor of B that fits)\n"
    "  --checkpoint-policy P none, block or sqrt only (default: none when it fits, else the\n"
    "                        budgeted choice)\n"
    "  --no-offload          never plan the optimizer state in host memory (by default it is\n"
    "                        when nothing else fits; sinter train --offload optimizer runs it)\n"
    "  --offload optimizer   always plan it in host memory\n"
    "  --lora R              LoRA fine-tuning of rank R (sinter train --lora): the base frozen,\n"
    "  --lora-alpha ALPHA    no gradients or optimizer state for it (the scale ALPHA/R,\n"
    "  --lora-targets T      default R; targets all (default), attn or mlp)\n"
    "Exits 1 when nothing fits, naming the smallest budget that would and the largest\n"
    "micro-batch that fits.\n";

sn_status cli_training_graph(const sn_gpt2_config *c, const sn_gpt2_lora *lora, int B, int T,
                             sn_graph **out, sn_err *e) {
    *out = sn_graph_new();
    if (!*out) return sn_fail_oom(e, sizeof(sn_graph), "the training graph");
    sn_gpt2 m;
    sn_status s = sn_gpt2_build_lora(*out, c, B, T, lora, &m, e);
    if (s) return s;
    (*out)->n_outputs = 0; /* training reads the loss and the gradients, not the logits */
    sn_graph_add_output(*out, m.loss);
    return SN_OK;
}

typedef struct {
    sn_gpt2_config c;
    const sn_gpt2_lora *lora;
    int T;
} plan_model;

static sn_status build(void *ctx, int B, sn_graph **out, sn_err *e) {
    const plan_model *m = ctx;
    return cli_training_graph(&m->c, m->lora, B, m->T, out, e);
}

int cli_plan_run(const sn_gpt2_config *c, const sn_gpt2_lora *lora, int T, const sn_plan_opts *o,
                 sn_plan *pl, FILE *f) {
    plan_model m = {*c, lora, T};
    sn_err e;
    sn_status s = sn_plan_make(o, build, &m, pl, &e);
    char b[32];
    char l[96] = "";
    if (lora)
        snprintf(l, sizeof l, ", LoRA rank %d alpha %g on %s", lora->lora.rank,
                 (double)lora->lora.alpha, sn_gpt2_lora_targets_name(lora->targets));
    fprintf(f, "plan: %s%s, batch %d x seq %d, budget %s, %s\n", c->name, l, o->batch, T,
            o->budget ? sn_bytes_str(o->budget, b, sizeof b) : "none",
            o->compile->target ? o->compile->target->name : "cpu");
    if (s) {
        fprintf(stderr, "sinter: %s\n", e.msg);
        return 1;
    }
    sn_plan_print(pl, o->budget, f);
    return 0;
}

int cli_plan(int argc, char **argv) {
    const char *model = NULL, *device = "cpu", *precision = "fp32";
    long B = 16, T = -1, micro = 0, rank = 0;
    double alpha = 0;
    unsigned targets = SN_GPT2_LORA_ALL;
    bool targets_given = false;
    long long mem = 0;
    int offload = SN_PLAN_OFFLOAD_AS_NEEDED;
    int policy = -1;
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            fputs(plan_usage, stdout);
            return 0;
        }
        if (!strcmp(k, "--no-offload")) {
            offload = SN_PLAN_OFFLOAD_NEVER;
            continue;
        }
        if (!v) return cli_fail("plan: option '%s' needs a value (see sinter plan --help)", k);
        i++;
        bool ok = true;
        if (!strcmp(k, "--model")) model = v;
        else if (!strcmp(k, "--device")) device = v;
        else if (!strcmp(k, "--precision")) precision = v;
        else if (!strcmp(k, "--offload")) {
            if (strcmp(v, "optimizer") && strcmp(v, "none"))
                return cli_fail("plan: --offload is optimizer or none, not '%s'", v);
            offload = strcmp(v, "none") ? SN_PLAN_OFFLOAD_ALWAYS : SN_PLAN_OFFLOAD_NEVER;
        }
        else if (!strcmp(k, "--batch")) ok = cli_int(v, 1, 1 << 16, &B);
        else if (!strcmp(k, "--seq")) ok = cli_int(v, 1, 1 << 20, &T);
        else if (!strcmp(k, "--micro-batch")) ok = cli_int(v, 1, 1 << 16, &micro);
        else if (!strcmp(k, "--lora")) ok = cli_int(v, 1, 4096, &rank);
        else if (!strcmp(k, "--lora-alpha")) {
            if (!cli_real(v, 1e-6, 1e6, &alpha)) /* as sinter train reads it */
                return cli_fail("plan: --lora-alpha wants a number > 0 and < 1e6, not '%s'", v);
        } else if (!strcmp(k, "--lora-targets")) {
            if (!sn_gpt2_lora_targets_parse(v, &targets))
                return cli_fail("plan: --lora-targets is attn, mlp or all, not '%s'", v);
            targets_given = true;
        }
        else if (!strcmp(k, "--mem")) ok = cli_bytes(v, &mem);
        else if (!strcmp(k, "--checkpoint-policy")) ok = (policy = sn_recompute_policy_parse(v)) >= 0;
        else return cli_fail("plan: unknown option '%s' (see sinter plan --help)", k);
        if (!ok) return cli_fail("plan: bad value '%s' (see sinter plan --help)", v);
    }
    if (!rank && (alpha > 0 || targets_given)) /* as sinter train refuses them */
        return cli_fail("plan: --lora-alpha and --lora-targets shape LoRA adapters: add --lora R "
                        "(the rank, e.g. 8)%s", "");
    if (!model) return cli_fail("plan: which model? add --model NAME%s", "");
    if (!mem) return cli_fail("plan: how much memory? add --mem N (6GiB, 500MiB)%s", "");
    if (policy == SN_RECOMPUTE_BUDGET) policy = -1;
    int prec = sn_precision_parse(precision);
    if (prec < 0) return cli_fail("plan: --precision is fp32, bf16, fp16 or tf32, not '%s'", precision);
    sn_target t;
    if (!strcmp(device, "cpu")) t = sn_target_cpu();
    else if (!strcmp(device, "cuda")) t = sn_target_cuda(80);
    else return cli_fail("plan: --device is cpu or cuda, not '%s'", device);
    sn_gpt2_config c;
    if (!sn_gpt2_config_find(model, &c)) return cli_fail("unknown model '%s'", model);
    if (T < 0) T = c.ctx;
    if (micro && B % micro) return cli_fail("plan: --micro-batch must divide --batch%s", "");
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.target = &t;
    po.precision = (sn_precision)prec; /* as the session compiles it (api/session.c) */
    sn_plan_opts o = {.batch = (int)B, .budget = mem, .micro_batch = (int)micro, .policy = policy,
                      .compile = &po, .offload = offload};
    sn_plan pl;
    sn_gpt2_lora lora = {.lora = {.rank = (int)rank, .alpha = alpha > 0 ? (float)alpha : (float)rank},
                         .targets = targets};
    return cli_plan_run(&c, rank ? &lora : NULL, (int)T, &o, &pl, stdout);
}
