/* kernel_cost.c: a static cost report per kernel of a model's training program, made without a
 * GPU: each generated kernel compiled by NVRTC for sm_80 and sm_90 (ptxas -v: registers, static
 * shared memory, spills, stack), its theoretical occupancy there (codegen/cuda/cuda_occupancy.c),
 * and the roofline model's bytes, FLOPs and time (roofline.c) at the H200's measured ceilings;
 * totals per kind, per layer for attention, and for the step. Convention: a model and a compiler's
 * report, never a measurement: docs/kernel_cost.md says what each column means.
 *
 *     bench/kernel_cost --model gpt2 --batch 16 --seq 1024 --precision bf16
 *     bench/kernel_cost --model gpt2 --batch 16 --seq 1024 --precision bf16 --kind attention
 *     bench/kernel_cost ... --arch sm_90 --machine h100 --json
 *     bench/kernel_cost --model gpt2 --batch 1 --seq 1024 --decode --nf4 [--no-split]
 *
 * --decode: the one-token decode program of generation (train/generate.h: B rows, a KV cache of
 * --seq positions) instead of the training step; --nf4: its frozen linear weights NF4 (the NF4
 * product, kernel.h); --no-split: compiled without the decode split (sn_target.split_decode), the
 * program as it was before the split, for the before and after of one run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "ir/ir.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "bench_json.h"
#include "roofline.h"

enum { MAX_ARCH = 3, N_OPT = 4 };

typedef struct {
    const char *model, *precision, *kind, *machine, *fp8;
    int batch, seq;
    int lora; /* --lora R: adapters of rank R (alpha R) on --lora-targets' layers, the base frozen */
    unsigned lora_targets; /* --lora-targets all|attn|mlp (default all), models/gpt2.h's bits */
    bool ia3; /* --ia3: IA3 vectors (frontend/ia3.h), the base frozen */
    bool decode, nf4, no_split; /* --decode [--nf4] [--no-split] (above) */
    bool apart; /* --apart: no siblings pass, no join_siblings (the products and pointwise
                   kernels apart, as before they were joined: both in one run to compare) */
    int arch[MAX_ARCH], n_arch;
    bool json;
} args;

static int usage(void) {
    fprintf(stderr, "usage: kernel_cost [--model gpt2|smollm2-135m|...] [--batch B] [--seq T] "
                    "[--lora R [--lora-targets all|attn|mlp] | --ia3] [--decode [--nf4] "
                    "[--no-split]] [--precision fp32|bf16|fp16|tf32] [--fp8 head|linear] "
                    "[--arch sm_80|sm_90|sm_75|sm_86|sm_89|sm_120 (repeatable; default sm_80 and sm_90)] "
                    "[--kind KIND (attention, row, pointwise, ...)] [--machine h200|h100|rtx4090|rtx3090] "
                    "[--apart (no products or pointwise kernels joined)] [--json]\n");
    return 2;
}

static int fail(const char *what, const sn_err *e) {
    fprintf(stderr, "kernel_cost: %s: %s\n", what, e->msg);
    return 1;
}

/* The kernel's kind as printed: attention kernels by their op (forward, dq, dkv, dk, dv, the
 * cache's), the sum of dk's and dv's parts (program/kernel.h) as its own. */
static const char *kind_of(const sn_kernel *k) {
    if (k->kind != SN_KER_ATTENTION) return sn_kernel_kind_name(k->kind);
    if (k->dkv_parts && k->stage == SN_SUM_FINISH) return "attn_sum";
    switch (k->anchor->op) {
    case SN_OP_ATTENTION: return "attn_fwd";
    case SN_OP_ATTENTION_BWD_Q: return "attn_dq";
    case SN_OP_ATTENTION_BWD_K: return k->anchor2 ? "attn_dkv" : "attn_dk";
    case SN_OP_ATTENTION_BWD_V: return "attn_dv";
    case SN_OP_ATTENTION_CACHE: return "attn_cache"; /* decoding over a KV cache */
    default: return sn_op_name(k->anchor->op);
    }
}

static bool want(const args *a, const sn_kernel *k) {
    if (!a->kind) return true;
    return !strcmp(a->kind, sn_kernel_kind_name(k->kind)) || !strcmp(a->kind, kind_of(k));
}

/* sn_cuda_grid_fill of x's launch on `sms` SMs. */
static double grid_fill(const sn_cuda_kernel_report *x, int sms) {
    return sn_cuda_grid_fill(&x->occ, (double)x->dims.grid[0] * x->dims.grid[1] * x->dims.grid[2],
                             sms);
}

/* One kernel's record: its launch, the model's cost (r), and ptxas's report for each of the n_arch
 * architectures (rep: n reports an architecture; i: this kernel's index). */
static void kernel_record(bj *o, const sn_kernel *k, const char *grid, const char *block,
                          const sn_roofline_kernel *r, const sn_cuda_kernel_report *rep, int n,
                          int i, int n_arch, int sms) {
    bj_str(o, "name", k->name);
    bj_str(o, "kind", kind_of(k));
    bj_str(o, "grid", grid);
    bj_str(o, "block", block);
    bj_num(o, "gflop", "%.4f", r->flops / 1e9);
    bj_num(o, "mb", "%.3f", r->bytes / 1e6);
    bj_num(o, "modeled_us", "%.3f", r->time_s * 1e6);
    bj *archs = bj_obj(o, "arch");
    for (int ai = 0; ai < n_arch; ai++) {
        const sn_cuda_kernel_report *x = &rep[(size_t)ai * n + i];
        if (!x->has_info) continue;
        char name[16];
        snprintf(name, sizeof name, "sm_%d", x->arch);
        bj *ar = bj_obj(archs, name);
        bj_int(ar, "registers", x->info.registers);
        bj_int(ar, "static_smem", x->info.shared_bytes);
        bj_int(ar, "dynamic_smem", x->dims.shared_bytes);
        bj_int(ar, "spill_stores", x->info.spill_store_bytes);
        bj_int(ar, "spill_loads", x->info.spill_load_bytes);
        bj_int(ar, "stack", x->info.stack_bytes);
        bj_int(ar, "blocks_per_sm", x->occ.blocks);
        bj_int(ar, "warps_per_sm", x->occ.warps);
        bj_num(ar, "occupancy", "%.4f", x->occ.occupancy);
        bj_num(ar, "grid_fill", "%.4f", grid_fill(x, sms));
        bj_str(ar, "limiter", x->occ.limiter);
    }
}

/* The model's graph with its loss as the only output, as sinter train keeps it (no logits to
 * store): a GPT-2 or a LLaMA-family shape, with LoRA adapters of rank a->lora on the linear
 * layers a->lora_targets names (alpha = rank, the base frozen) when a->lora > 0, or IA3 vectors
 * when a->ia3. */
static sn_status model_decode(sn_graph *g, const args *a, int *n_layer, sn_err *e);

static sn_status model_loss(sn_graph *g, const args *a, int *n_layer, sn_err *e) {
    if (a->decode) return model_decode(g, a, n_layer, e);
    sn_gpt2_lora l = {.lora = {.rank = a->lora, .alpha = (float)a->lora}, .targets = a->lora_targets};
    if (a->ia3) l = (sn_gpt2_lora){.ia3 = true};
    const sn_gpt2_lora *lp = a->lora || a->ia3 ? &l : NULL;
    sn_gpt2_config c;
    sn_llama_config lc;
    sn_node *loss;
    sn_status s;
    if (sn_gpt2_config_find(a->model, &c)) {
        sn_gpt2 m;
        s = sn_gpt2_build_lora(g, &c, a->batch, a->seq, lp, &m, e);
        loss = m.loss, *n_layer = c.n_layer;
    } else if (sn_llama_config_find(a->model, &lc)) {
        sn_llama m;
        s = sn_llama_build_lora(g, &lc, a->batch, a->seq, lp, &m, e);
        loss = m.loss, *n_layer = lc.n_layer;
    } else {
        return sn_fail(e, SN_ERR_INVALID, "unknown model '%s' (%s; %s)", a->model,
                       sn_gpt2_config_names(), sn_llama_config_names());
    }
    if (s) return s;
    sn_graph_clear_outputs(g);
    sn_graph_add_output(g, loss);
    return SN_OK;
}

/* The decode graph of generation (train/generate.h) for a->batch rows over a cache of a->seq
 * positions, its outputs as the generator keeps them. */
static sn_status model_decode(sn_graph *g, const args *a, int *n_layer, sn_err *e) {
    sn_gpt2_config c;
    sn_llama_config lc;
    sn_status s;
    if (sn_gpt2_config_find(a->model, &c)) {
        c.ctx = a->seq, *n_layer = c.n_layer;
        s = sn_gpt2_build_kv(g, &c, a->batch, 1, true, NULL, e);
    } else if (sn_llama_config_find(a->model, &lc)) {
        lc.ctx = a->seq, *n_layer = lc.n_layer;
        s = sn_llama_build_kv(g, &lc, a->batch, 1, true, e);
    } else {
        return sn_fail(e, SN_ERR_INVALID, "unknown model '%s' (%s; %s)", a->model,
                       sn_gpt2_config_names(), sn_llama_config_names());
    }
    for (int i = 0; !s && a->nf4 && i < g->n_nodes; i++) /* so that the nf4 pass stores the */
        if (g->nodes[i]->op == SN_OP_PARAM) sn_param_freeze(g->nodes[i]); /* linear ones */
    return s;
}

int main(int argc, char **argv) {
    args a = {.model = "gpt2", .precision = "bf16", .machine = "h200", .batch = 16, .seq = 1024,
              .lora_targets = SN_GPT2_LORA_ALL};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json")) { a.json = true; continue; }
        if (!strcmp(argv[i], "--ia3")) { a.ia3 = true; continue; }
        if (!strcmp(argv[i], "--decode")) { a.decode = true; continue; }
        if (!strcmp(argv[i], "--nf4")) { a.nf4 = true; continue; }
        if (!strcmp(argv[i], "--no-split")) { a.no_split = true; continue; }
        if (!strcmp(argv[i], "--apart")) { a.apart = true; continue; }
        if (!v) return usage();
        if (!strcmp(argv[i], "--model")) a.model = v;
        else if (!strcmp(argv[i], "--batch")) a.batch = atoi(v);
        else if (!strcmp(argv[i], "--seq")) a.seq = atoi(v);
        else if (!strcmp(argv[i], "--lora")) a.lora = atoi(v);
        else if (!strcmp(argv[i], "--lora-targets")) {
            if (!sn_gpt2_lora_targets_parse(v, &a.lora_targets)) return usage();
        }
        else if (!strcmp(argv[i], "--precision")) a.precision = v;
        else if (!strcmp(argv[i], "--fp8")) a.fp8 = v;
        else if (!strcmp(argv[i], "--kind")) a.kind = v;
        else if (!strcmp(argv[i], "--machine")) a.machine = v;
        else if (!strcmp(argv[i], "--arch") && a.n_arch < MAX_ARCH)
            a.arch[a.n_arch++] = atoi(v + (strncmp(v, "sm_", 3) ? 0 : 3));
        else return usage();
        i++;
    }
    if (!a.n_arch) a.arch[a.n_arch++] = 80, a.arch[a.n_arch++] = 90;
    for (int i = 0; i < a.n_arch; i++)
        if (!sn_cuda_sm_limits_of(a.arch[i])) return usage();
    int prec = sn_precision_parse(a.precision);
    const sn_roofline_machine *mach = sn_roofline_machine_find(a.machine);
    int fp8 = a.fp8 ? sn_fp8_policy_parse(a.fp8) : 0;
    if (a.batch < 1 || a.seq < 1 || a.lora < 0 || (a.lora && a.ia3) || prec < 0 || !mach || fp8 < 0 ||
        (fp8 && a.decode) ||
        (a.lora_targets != SN_GPT2_LORA_ALL && !a.lora) ||
        (a.decode && (a.lora || a.ia3)) || ((a.nf4 || a.no_split) && !a.decode))
        return usage();

    /* the training (or decode) program for a CUDA target, as the CUDA device compiles it */
    sn_err e = {0};
    sn_graph *g = sn_graph_new();
    int n_layer = 1;
    if (!g || model_loss(g, &a, &n_layer, &e)) return fail("the program", &e);
    sn_target tg = sn_target_cuda(a.arch[a.n_arch - 1]);
    tg.split_decode = !a.no_split;
    tg.fuse_siblings = !a.apart;
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = !a.decode;
    o.precision = (sn_precision)prec;
    o.base16 = true; /* as sinter train compiles it: a frozen base in the compute dtype */
    o.fp8 = fp8;
    if (a.decode) /* as the generator compiles it (train/generate.c): fp32, no rewrite but NF4 */
        o = (sn_pipeline_opts){.target = &tg, .nf4 = a.nf4}, a.precision = "fp32";
    o.target = &tg;
    o.keep_siblings = a.apart;
    sn_program *p = NULL;
    if (sn_compile(g, &o, &p, NULL, &e)) return fail("the program", &e);
    int64_t n_params = p->layout.flat_n; /* the trained ones: the optimizer's */

    /* the kernels asked for, plus the trainer's optimizer kernels over every parameter */
    int n = 0;
    const sn_kernel **ks = calloc((size_t)p->n_kernels + N_OPT, sizeof *ks);
    sn_kernel opt[N_OPT];
    static const sn_kernel_kind opt_kinds[N_OPT] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP,
                                                    SN_KER_ADAMW};
    for (int i = 0; i < p->n_kernels; i++)
        if (want(&a, p->kernels[i])) ks[n++] = p->kernels[i];
    int n_prog = n; /* ks[0..n_prog) are the program's */
    for (int i = 0; i < N_OPT && !a.decode; i++) { /* (decoding trains nothing) */
        /* over the program's parameter layout, as the trainer launches them (runner.c) */
        const sn_param_layout *l = &p->layout;
        char name[64]; /* AdamW writes the weights' copies */
        snprintf(name, sizeof name, "optimizer_%s", sn_kernel_kind_name(opt_kinds[i]));
        opt[i] = sn_optim_kernel(opt_kinds[i], l->flat_n, l->flat_decay, l->low, name);
        if (want(&a, &opt[i])) ks[n++] = &opt[i];
    }
    if (!n) {
        fprintf(stderr, "kernel_cost: no kernel of kind %s\n", a.kind);
        return 2;
    }
    sn_cuda_kernel_report *rep = calloc((size_t)n * MAX_ARCH, sizeof *rep);
    if (!ks || !rep) return 1;
    for (int ai = 0; ai < a.n_arch; ai++) {
        sn_status st = sn_cuda_ptxas_report(ks, n, a.arch[ai], rep + (size_t)ai * n, &e);
        if (st == SN_ERR_UNSUPPORTED) {
            fprintf(stderr, "kernel_cost: no ptxas report (%s); the model alone follows\n", e.msg);
            a.n_arch = 0;
        } else if (st) {
            return fail("NVRTC", &e);
        }
    }

    /* the model: per kernel, per kind, per step */
    sn_roofline_opts ro = {.tf32 = prec == SN_PRECISION_TF32};
    sn_roofline_step step = sn_roofline_program(p, n_params, mach, &ro);
    double kind_s[SN_KER_KIND_COUNT] = {0}, kind_b[SN_KER_KIND_COUNT] = {0},
           kind_f[SN_KER_KIND_COUNT] = {0}, sum_s = 0;
    int kind_n[SN_KER_KIND_COUNT] = {0};
    /* the thin products by form (kernel.h): columns, rank (expansions), sum (a sum's PARTIAL,
       FINISH and the joined FINISHes' blocks counted with their hosts) */
    double thin_s[3] = {0};
    int thin_n[3] = {0};
    bj *rec = NULL, *kernels = NULL;
    if (a.json) {
        rec = bj_new();
        bj_str(rec, "model", a.model);
        bj_int(rec, "batch", a.batch);
        bj_int(rec, "seq", a.seq);
        bj_str(rec, "precision", a.precision);
        bj_int(rec, "lora", a.lora);
        bj_int(rec, "ia3", a.ia3);
        bj *m = bj_obj(rec, "machine");
        bj_str(m, "name", mach->name);
        bj_num(m, "bf16_tflops", "%.1f", mach->bf16_tflops);
        bj_num(m, "tb_per_s", "%.2f", mach->tb_per_s);
        kernels = bj_arr(rec, "kernels");
    } else {
        printf("kernel_cost: %s B=%d %s=%d %s%s%s%s%s: %d kernels (%d shown%s), "
               "modeled on %s (%.0f TFLOP/s bf16, %.2f TB/s)\n", a.model, a.batch,
               a.decode ? "cache" : "T", a.seq, a.precision, a.lora ? " LoRA" : a.ia3 ? " IA3" : "",
               a.decode ? (a.nf4 ? " decode NF4" : " decode") : "",
               a.decode && a.no_split ? " (no split)" : "", a.apart ? " (apart)" : "", p->n_kernels, n,
               a.decode ? "" : " with the optimizer's", mach->name, mach->bf16_tflops,
               mach->tb_per_s);
        printf("%-34s %-10s %-13s %-8s", "kernel", "kind", "grid", "block");
        for (int ai = 0; ai < a.n_arch; ai++)
            printf(" | sm_%d: %4s %6s %5s %5s %6s %4s %4s", a.arch[ai], "regs", "smem", "spill",
                   "stack", "blk/SM", "occ", "fill");
        printf(" | %9s %9s %10s\n", "GFLOP", "MB", "modeled us");
    }
    for (int i = 0; i < n; i++) {
        const sn_kernel *k = ks[i];
        sn_roofline_kernel r = {0};
        if (i < n_prog) {
            r = sn_roofline_kernel_model(k, mach, &ro);
            kind_s[k->kind] += r.time_s, kind_b[k->kind] += r.bytes, kind_f[k->kind] += r.flops;
            kind_n[k->kind]++;
            sum_s += r.time_s;
            if (k->kind == SN_KER_THIN) {
                sn_thin t = sn_thin_of(k);
                int form = t.sum ? 2 : t.rank ? 1 : 0;
                thin_s[form] += r.time_s, thin_n[form]++;
            }
        }
        const sn_cuda_kernel_report *r0 = a.n_arch ? &rep[i] : NULL;
        char grid[32] = "-", block[32] = "-";
        if (r0 && r0->has_info) {
            snprintf(grid, sizeof grid, "%ux%ux%u", r0->dims.grid[0], r0->dims.grid[1], r0->dims.grid[2]);
            snprintf(block, sizeof block, "%ux%ux%u", r0->dims.block[0], r0->dims.block[1], r0->dims.block[2]);
        }
        if (a.json) {
            kernel_record(bj_push_obj(kernels), k, grid, block, &r, rep, n, i, a.n_arch, mach->sms);
            continue;
        }
        printf("%-34.34s %-10s %-13s %-8s", k->name, kind_of(k), grid, block);
        for (int ai = 0; ai < a.n_arch; ai++) {
            const sn_cuda_kernel_report *x = &rep[(size_t)ai * n + i];
            if (!x->has_info) {
                printf(" | %-6s %4s %6s %5s %5s %6s %4s %4s", "", "-", "-", "-", "-", "-", "-",
                       "-");
                continue;
            }
            printf(" | %-6s %4d %6u %5d %5d %6d %3.0f%% %3.0f%%", "", x->info.registers,
                   x->info.shared_bytes + x->dims.shared_bytes,
                   x->info.spill_store_bytes + x->info.spill_load_bytes, x->info.stack_bytes,
                   x->occ.blocks, 100 * x->occ.occupancy, 100 * grid_fill(x, mach->sms));
        }
        if (i < n_prog) printf(" | %9.3f %9.2f %10.2f\n", r.flops / 1e9, r.bytes / 1e6, r.time_s * 1e6);
        else printf(" | %9s %9s %10s\n", "-", "-", "(step)");
    }

    /* totals: per kind (the kernels shown), attention per layer, the step (every kernel and the
     * optimizer, whatever --kind shows) */
    double attn_layer = kind_s[SN_KER_ATTENTION] / n_layer;
    if (a.json) {
        bj *kinds = bj_obj(rec, "kinds");
        for (int k = 0; k < SN_KER_KIND_COUNT; k++) {
            if (!kind_n[k]) continue;
            bj *kr = bj_obj(kinds, sn_kernel_kind_name((sn_kernel_kind)k));
            bj_int(kr, "kernels", kind_n[k]);
            bj_num(kr, "gflop", "%.3f", kind_f[k] / 1e9);
            bj_num(kr, "mb", "%.2f", kind_b[k] / 1e6);
            bj_num(kr, "modeled_ms", "%.4f", kind_s[k] * 1e3);
        }
        bj_num(rec, "attention_per_layer_ms", "%.4f", attn_layer * 1e3);
        bj_num(rec, "shown_ms", "%.4f", sum_s * 1e3);
        bj *sr = bj_obj(rec, "step");
        bj_int(sr, "kernels", p->n_kernels);
        bj_num(sr, "gflop", "%.3f", step.flops / 1e9);
        bj_num(sr, "mb", "%.2f", step.bytes / 1e6);
        bj_num(sr, "optimizer_ms", "%.4f", step.optimizer_s * 1e3);
        bj_num(sr, "modeled_ms", "%.4f", step.time_s * 1e3);
        bj_print(rec, stdout);
    } else {
        printf("totals by kind (modeled on %s):\n", mach->name);
        for (int k = 0; k < SN_KER_KIND_COUNT; k++) {
            if (!kind_n[k]) continue;
            printf("  %-10s %4d kernels %10.2f GFLOP %10.1f MB %9.3f ms\n",
                   sn_kernel_kind_name((sn_kernel_kind)k), kind_n[k], kind_f[k] / 1e9,
                   kind_b[k] / 1e6, kind_s[k] * 1e3);
        }
        if (kind_n[SN_KER_THIN])
            printf("  thin by form: columns %d kernels %.3f ms, rank (expansions) %d %.3f ms, sums "
                   "%d %.3f ms\n", thin_n[0], thin_s[0] * 1e3, thin_n[1], thin_s[1] * 1e3,
                   thin_n[2], thin_s[2] * 1e3);
        if (kind_n[SN_KER_ATTENTION])
            printf("  attention per layer (%d layers): %.3f ms (FlashAttention-2 measured 0.671 ms, "
                   "cuDNN 0.568 ms on the H200)\n", n_layer, attn_layer * 1e3);
        printf("step: %d kernels + optimizer, %.1f GFLOP, %.1f MB; modeled %.3f ms (optimizer "
               "%.3f ms); the kernels shown %.3f ms\n", p->n_kernels, step.flops / 1e9,
               step.bytes / 1e6, step.time_s * 1e3, step.optimizer_s * 1e3, sum_s * 1e3);
    }
    free(rep);
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
    return 0;
}
