/* graph_cmd.c: `sinter graph`: a model's IR through the compile pipeline, as text; with
 * --dump-after, the IR (or the program) after one pass; with --emit-cuda, the kernels' CUDA C.
 * Convention: the pipeline is the one `sinter train` compiles with (passes/pipeline.h). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "cli.h"

typedef struct {
    const char *model, *tokenizer, *pad_vocab, *policy, *precision, *dump_after, *emit_cuda, *fp8;
    const char *lora_targets;
    bool backward, no_fuse_attention, schedule, ia3, base_f32;
    long long arena_budget;
    long batch, seq, arch, lora, chunk_logits;
} graph_args;

#define O(field) offsetof(graph_args, field)

static const cli_opt graph_opts[] = {
    {"model", 'm', CLI_CHOICE, "NAME", O(model), .choices_fn = cli_model_names,
     .help = "the model (required): GPT-2's or the LLaMA family's"},
    {"tokenizer", 0, CLI_CHOICE, "T", O(tokenizer), .choices = "gpt2, bytes",
     .help = "the vocabulary as sinter train has it: gpt2 50257 (the gpt2\n"
             "models' default), bytes 256 (demo's and tiny's; a LLaMA\n"
             "model's default is its own)"},
    {"lora", 0, CLI_INT, "R", O(lora), 1, 4096,
     .help = "LoRA adapters of rank R (sinter train --lora), the base frozen"},
    {"lora-targets", 0, CLI_CHOICE, "T", O(lora_targets), .choices = "attn, mlp, all",
     .help = "the layers adapted (default all)"},
    {"ia3", 0, CLI_FLAG, NULL, O(ia3), .help = "IA3 vectors (sinter train --ia3), the base frozen"},
    {"base-f32", 0, CLI_FLAG, NULL, O(base_f32),
     .help = "in bf16 or fp16: the frozen base's linear weights f32 with 16-bit\n"
             "copies (sinter train --base-f32), not in the compute dtype"},
    {"backward", 0, CLI_FLAG, NULL, O(backward), .help = "with the backward graph appended (autodiff)"},
    {"dump-after", 0, CLI_CHOICE, "PASS", O(dump_after), .choices_fn = sn_pipeline_pass_names,
     .help = "print the IR (after fuse, schedule and memplan: the program)\n"
             "after PASS instead of the final graph"},
    {"no-fuse-attention", 0, CLI_FLAG, NULL, O(no_fuse_attention),
     .help = "keep attention written out (matmul, mask, softmax, matmul)"},
    {"schedule", 0, CLI_FLAG, NULL, O(schedule),
     .help = "reorder kernels so that large values die earlier (schedule pass)"},
    {"pad-vocab", 0, CLI_STR, "N", O(pad_vocab),
     .help = "pad the vocabulary to a multiple of N (default 64; pow2: the\n"
             "next power of two; 0: no padding)"},
    {"checkpoint-policy", 0, CLI_CHOICE, "P", O(policy), .choices = "none, block, sqrt, budget",
     .help = "recompute activations in the backward (budget: within\n"
             "--arena-budget)"},
    {"arena-budget", 0, CLI_BYTES, "N", O(arena_budget),
     .help = "the activation arena --checkpoint-policy budget fits in (2GiB)"},
    {"chunk-logits", 0, CLI_INT, "N", O(chunk_logits), 0, 1 << 30,
     .help = "the LM head and its loss in chunks of N rows (tokens), the\n"
             "logits never whole (0: off, the default; needs --backward)"},
    {"fp8", 0, CLI_CHOICE, "P", O(fp8), .choices = "off, head, linear",
     .help = "products on 8-bit operands (the fp8 pass; needs --backward):\n"
             "head: the LM head's; linear: every linear layer's"},
    {"batch", 'b', CLI_INT, "B", O(batch), 1, 1 << 20, .help = "input batch (default 4)"},
    {"seq", 't', CLI_INT, "T", O(seq), 1, 1 << 20, .help = "input length (default: the model's context)"},
    {"precision", 0, CLI_CHOICE, "P", O(precision), .choices = "fp32, bf16, fp16, tf32",
     .help = "fp32 (default), bf16, fp16 (the autocast pass) or tf32"},
    {"emit-cuda", 0, CLI_STR, "DIR", O(emit_cuda),
     .help = "write the kernels' CUDA C (DIR/program.cu) and ptxas report"},
    {"arch", 0, CLI_INT, "N", O(arch), 75, 200, .help = "the compute capability for --emit-cuda (default 80)"},
};

static int cmd_graph(int argc, char **argv);

const cli_command cli_graph_cmd = {
    .name = "graph",
    .synopsis = "--model NAME [options]",
    .summary = "Prints the model's IR after the compile pipeline (or after one pass).",
    .opts = CLI_OPTS(graph_opts),
    .run = cmd_graph,
};

static void print_count(FILE *f, long long n) {
    char digits[32], out[48];
    int len = snprintf(digits, sizeof digits, "%lld", n), k = 0;
    for (int i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0) out[k++] = ',';
        out[k++] = digits[i];
    }
    out[k] = 0;
    fputs(out, f);
}

/* The pipeline's options from the parsed ones; 2 after a usage error. */
static int pipeline_opts(const graph_args *a, sn_pipeline_opts *o) {
    const cli_command *cmd = &cli_graph_cmd;
    *o = sn_pipeline_defaults();
    o->backward = a->backward;
    if (a->no_fuse_attention) o->fuse_attention = false;
    if (a->schedule) o->schedule = SN_SCHEDULE_ON;
    long pad = 0;
    char *end;
    if (a->pad_vocab && !strcmp(a->pad_vocab, "pow2")) o->pad_vocab = SN_PAD_VOCAB_POW2;
    else if (a->pad_vocab) {
        pad = strtol(a->pad_vocab, &end, 10);
        if (!*a->pad_vocab || *end || pad < 0 || pad > 1 << 20)
            return cli_usage_error(cmd, "--pad-vocab wants a multiple from 0 to 1048576 (0: no "
                                   "padding) or pow2, not '%s'", a->pad_vocab);
        o->pad_vocab = (int)pad;
    }
    if (a->policy) o->checkpoint = sn_recompute_policy_parse(a->policy);
    if (a->arena_budget) o->checkpoint_budget = a->arena_budget;
    if (a->chunk_logits && !a->backward)
        return cli_usage_error(cmd, "--chunk-logits splits the loss's backward too: add --backward");
    o->chunk_logits = a->chunk_logits;
    if (a->fp8 && sn_fp8_policy_parse(a->fp8) > 0 && !a->backward)
        return cli_usage_error(cmd, "--fp8 picks the gradients' format by the backward: add --backward");
    if (a->fp8) o->fp8 = sn_fp8_policy_parse(a->fp8);
    if (a->precision) o->precision = (sn_precision)sn_precision_parse(a->precision);
    o->base16 = !a->base_f32; /* as sinter train compiles it */
    o->dump_after = a->dump_after;
    return 0;
}

static int cmd_graph(int argc, char **argv) {
    graph_args a = {.batch = 4, .seq = -1, .arch = 80};
    int rc = cli_parse(&cli_graph_cmd, argc, argv, &a);
    if (rc >= 0) return rc;
    if (!a.model) return cli_usage_error(&cli_graph_cmd, "which model? add --model NAME");
    sn_pipeline_opts o;
    if ((rc = pipeline_opts(&a, &o))) return rc;
    sn_target cuda = sn_target_cuda((int)a.arch); /* --emit-cuda: the program a CUDA device runs */
    if (a.emit_cuda) o.target = &cuda;
    if (!a.lora && a.lora_targets) return cli_usage_error(&cli_graph_cmd, "--lora-targets needs --lora R");
    unsigned targets = SN_GPT2_LORA_ALL;
    if (a.lora_targets) sn_gpt2_lora_targets_parse(a.lora_targets, &targets);
    if (a.lora && a.ia3) return cli_usage_error(&cli_graph_cmd, "--ia3 and --lora are two ways to fine-tune: choose one");
    sn_gpt2_lora lora = {.lora = {.rank = (int)a.lora, .alpha = (float)a.lora}, .targets = targets};
    if (a.ia3) lora = (sn_gpt2_lora){.ia3 = true};
    sn_graph *g = sn_graph_new();
    sn_err e;
    sn_node *loss = NULL;
    long B = a.batch, T = a.seq;
    char head[256];
    sn_status s = g ? SN_OK : sn_fail_oom(&e, sizeof *g, "the graph");
    cli_model md;
    cli_model_find(a.model, a.tokenizer, &md);
    if (T < 0) T = cli_model_ctx(&md);
    cli_model_describe(&md, head, sizeof head);
    if (!s) s = cli_model_build(&md, a.lora || a.ia3 ? &lora : NULL, (int)B, (int)T, g, &loss, &e);
    if (!s && a.backward) { /* a training graph: the loss alone, as sinter train keeps it */
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, loss);
    }
    sn_pipeline_stats st = {0};
    if (!s) {
        printf("# model %s: %s; input %ld x %ld%s\n", a.model, head, B, T, a.lora ? "; LoRA" : a.ia3 ? "; IA3" : "");
        printf("# parameters: ");
        print_count(stdout, (long long)sn_graph_param_count(g));
        printf("\n");
        /* the kernels and the memory plan only when asked for: the graph passes are quick */
        bool program = a.emit_cuda || (o.dump_after && (!strcmp(o.dump_after, "fuse") || !strcmp(o.dump_after, "schedule") ||
                                           !strcmp(o.dump_after, "join_finish") ||
                                           !strcmp(o.dump_after, "memplan")));
        sn_program *p = NULL;
        s = sn_compile(g, &o, program ? &p : NULL, &st, &e);
        rc = !s && a.emit_cuda ? cli_emit_cuda(p, a.emit_cuda, (int)a.arch) : 0;
        sn_program_free(p);
        if (rc) {
            sn_graph_free(g);
            return rc;
        }
    }
    if (!s && !o.dump_after && !a.emit_cuda) {
        printf("# after the pipeline\n");
        sn_graph_print(g, stdout);
    }
    if (!s) {
        printf("# %d nodes (%d forward); attention blocks fused: %d; vocabulary tables padded: %d; "
               "precision %s, casts added: %d", g->n_nodes, g->n_forward, st.attention_fused,
               st.vocab_padded, sn_precision_name(o.precision), st.casts);
        if (o.checkpoint)
            printf("; checkpoint %s: %d nodes recomputed, %.1f%% extra FLOPs",
                   sn_recompute_policy_name((sn_recompute_policy)o.checkpoint), st.checkpoint_recomputed,
                   st.step_flops > 0 ? 100 * st.checkpoint_extra_flops / st.step_flops : 0.0);
        if (st.logits_chunks) printf("; LM head in %d chunks", st.logits_chunks);
        if (st.siblings_fused) printf("; products joined: %d", st.siblings_fused);
        if (st.siblings_joined) printf("; pointwise kernels joined: %d", st.siblings_joined);
        if (o.schedule)
            printf("; schedule: %d kernels moved, live arena bytes at most %lld -> %lld", st.schedule_moved,
                   (long long)st.schedule_peak_before, (long long)st.schedule_peak_after);
        printf(" (parameters now ");
        print_count(stdout, (long long)sn_graph_param_count(g));
        printf(")\n");
    }
    sn_graph_free(g);
    if (s) {
        fprintf(stderr, "sinter graph: %s\n", e.msg);
        return 1;
    }
    return 0;
}
