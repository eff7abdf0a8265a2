/* sinter.c: the command line: `sinter info`, `sinter graph`, `sinter train`, `sinter prepare`.
 * Convention: the library reports errors to this file; only this file prints usage and exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/info.h"
#include "cli.h"

static const char usage_text[] =
    "usage: sinter <command> [options]\n"
    "\n"
    "commands:\n"
    "  info                       versions, CPU features, CUDA devices\n"
    "  graph --model NAME         print the model's IR\n"
    "        [--backward]         with the backward graph appended (autodiff)\n"
    "        [--dump-after PASS]  print the IR after PASS (%s)\n"
    "        [--no-fuse-attention]  keep attention written out (matmul, mask, softmax, matmul)\n"
    "        [--schedule]         reorder kernels so that large values die earlier (schedule pass)\n"
    "        [--pad-vocab N]      pad the vocabulary to a multiple of N (default 64; pow2: the\n"
    "                             next power of two; 0: no padding)\n"
    "        [--batch B] [--seq T]  input shape (default 4 x the model's context)\n"
    "        [--precision P]      fp32, bf16, fp16 (the autocast pass) or tf32 (default fp32)\n"
    "        [--emit-cuda DIR] [--arch N]  write the kernels' CUDA C and ptxas report (sm_N, 80)\n"
    "  train [options]            train a GPT on a text corpus (sinter train --help)\n"
    "  plan --model NAME --mem N  the memory a training run needs and the choice that fits N\n"
    "                             (sinter plan --help)\n"
    "  prepare --out PREFIX       tokenize a corpus into llm.c token shards (sinter prepare --help)\n"
    "  export CKPT --to DIR       a GPT-2 checkpoint as a Hugging Face model (or --to-llmc FILE:\n"
    "                             llm.c's .bin) (sinter export --help)\n"
    "\n"
    "models: %s\n";

void cli_usage(FILE *f) { fprintf(f, usage_text, sn_pipeline_pass_names(), sn_gpt2_config_names()); }

int cli_fail(const char *fmt, const char *arg) {
    fprintf(stderr, "sinter: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run `sinter help` for usage)\n");
    return 2;
}

bool cli_int(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_real(const char *s, double lo, double hi, double *out) {
    char *end;
    *out = strtod(s, &end);
    return *s && !*end && *out >= lo && *out < hi;
}

bool cli_bytes(const char *s, long long *out) {
    static const struct { const char *suffix; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KiB", 1024.0}, {"M", 1048576.0}, {"MiB", 1048576.0},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"T", 1099511627776.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].suffix) && v * units[i].scale < 9e18) {
            *out = (long long)(v * units[i].scale);
            return *out > 0;
        }
    return false;
}

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

static int cmd_graph(int argc, char **argv) {
    const char *model = NULL;
    sn_pipeline_opts o = sn_pipeline_defaults();
    long B = 4, T = -1, pad, arch = 80;
    const char *emit_cuda = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--backward")) o.backward = true;
        else if (!strcmp(a, "--no-fuse-attention")) o.fuse_attention = false;
        else if (!strcmp(a, "--schedule")) o.schedule = SN_SCHEDULE_ON;
        else if (!strcmp(a, "--pad-vocab") && v) {
            if (!strcmp(argv[++i], "pow2")) o.pad_vocab = SN_PAD_VOCAB_POW2;
            else if (cli_int(v, 0, 1 << 20, &pad)) o.pad_vocab = pad;
            else return cli_fail("--pad-vocab wants a multiple (0: no padding) or pow2, not '%s'", v);
        }
        else if (!strcmp(a, "--model") && v) model = argv[++i];
        else if (!strcmp(a, "--checkpoint-policy") && v) {
            if ((o.checkpoint = sn_recompute_policy_parse(argv[++i])) < 0)
                return cli_fail("--checkpoint-policy is none, block, sqrt or budget, not '%s'", v);
        } else if (!strcmp(a, "--arena-budget") && v) {
            long long b;
            if (!cli_bytes(argv[++i], &b)) return cli_fail("--arena-budget wants a size like 2GiB, not '%s'", v);
            o.checkpoint_budget = b;
        } else if (!strcmp(a, "--precision") && v) {
            int p = sn_precision_parse(argv[++i]);
            if (p < 0) return cli_fail("--precision wants fp32, bf16, fp16 or tf32, not '%s'", v);
            o.precision = (sn_precision)p;
        }
        else if (!strcmp(a, "--dump-after") && v) o.dump_after = argv[++i];
        else if (!strcmp(a, "--emit-cuda") && v) emit_cuda = argv[++i];
        else if (!strcmp(a, "--arch") && v) {
            if (!cli_int(argv[++i], 75, 200, &arch)) return cli_fail("--arch wants a compute capability like 80, not '%s'", v);
        }
        else if (!strcmp(a, "--batch") && v) {
            if (!cli_int(argv[++i], 1, 1 << 20, &B)) return cli_fail("--batch wants a positive integer, not '%s'", v);
        } else if (!strcmp(a, "--seq") && v) {
            if (!cli_int(argv[++i], 1, 1 << 20, &T)) return cli_fail("--seq wants a positive integer, not '%s'", v);
        } else return cli_fail("graph: unknown or incomplete option '%s'", a);
    }
    if (!model) return cli_fail("graph: which model? add --model NAME%s", "");
    sn_gpt2_config c;
    if (!sn_gpt2_config_find(model, &c)) return cli_fail("unknown model '%s'", model);
    if (T < 0) T = c.ctx;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_status s = g ? sn_gpt2_build(g, &c, (int)B, (int)T, &m, &e) : sn_fail_oom(&e, sizeof *g, "the graph");
    sn_pipeline_stats st;
    if (!s) {
        printf("# model %s: vocab %d, context %d, %d layers, %d heads, %d channels; input %ld x %ld\n",
               c.name, c.vocab, c.ctx, c.n_layer, c.n_head, c.n_embd, B, T);
        printf("# parameters: ");
        print_count(stdout, (long long)sn_graph_param_count(g));
        printf("\n");
        /* the kernels and the memory plan only when asked for: the graph passes are quick */
        bool program = emit_cuda || (o.dump_after && (!strcmp(o.dump_after, "fuse") || !strcmp(o.dump_after, "schedule") ||
                                         !strcmp(o.dump_after, "memplan")));
        sn_program *p = NULL;
        s = sn_compile(g, &o, program ? &p : NULL, &st, &e);
        int rc = !s && emit_cuda ? cli_emit_cuda(p, emit_cuda, (int)arch) : 0;
        sn_program_free(p);
        if (rc) {
            sn_graph_free(g);
            return rc;
        }
    }
    if (!s && !o.dump_after && !emit_cuda) {
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
        if (o.schedule)
            printf("; schedule: %d kernels moved, live arena bytes at most %lld -> %lld", st.schedule_moved,
                   (long long)st.schedule_peak_before, (long long)st.schedule_peak_after);
        printf(" (parameters now ");
        print_count(stdout, (long long)sn_graph_param_count(g));
        printf(")\n");
    }
    sn_graph_free(g);
    if (s) {
        fprintf(stderr, "sinter: %s\n", e.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        cli_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "info")) {
        if (argc > 2) return cli_fail("info takes no options, got '%s'", argv[2]);
        sn_info_print(stdout);
        return 0;
    }
    if (!strcmp(cmd, "graph")) return cmd_graph(argc - 2, argv + 2);
    if (!strcmp(cmd, "train")) return cli_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cli_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "prepare")) return cli_prepare(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return cli_export(argc - 2, argv + 2); /* issue 23 */
    return cli_fail("unknown command '%s'", cmd);
}
