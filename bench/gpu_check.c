/* gpu_check.c: the GPU check's program (tools/gpu_check builds and runs it; docs/gpu.md): opens
 * the device, runs every step of gpu_check.h in order, writes the report, exits 1 if any step
 * failed. Defaults are the full check on a large GPU (under 10 minutes on an H100); --small is
 * the same check at sizes a stand-in driver or the CPU runs in a minute or two.
 *
 *     build-cuda/bench/gpu_check --out /tmp/check                   # on a GPU machine
 *     build/bench/gpu_check --device cpu --small --out /tmp/check   # the check itself, here
 *     build/bench/gpu_check --device cpu --write-golden bench/gpu_check_golden.txt */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/cuda/cuda_device.h"
#include "gpu_check.h"

#ifndef SN_BENCH_DIR
#define SN_BENCH_DIR "bench" /* where the golden files are (meson passes the source folder) */
#endif

static const char usage[] =
    "usage: gpu_check [--out DIR] [--device cuda|cpu] [--small] [--seed N] [--cache-dir DIR]\n"
    "                 [--train-model M --train-batch B --train-seq T --train-steps N]\n"
    "                 [--golden FILE] [--golden-bf16 FILE]\n"
    "                 [--time-model M] [--time-size BxT]... [--time-steps N] [--warmup N]\n"
    "                 [--gemm-n N] [--copy-mib N]"
    "                 [--gemm-f32]\n"
    "                 [--tiny-model M --tiny-steps N] [--att-T T]\n"
    "                 [--att-time BxHxTxD[/KV]]... [--att-reps N] [--anchors DIR]\n"
    "                 [--att-tiles 'fwd=WxTxS,dq=..,dkv=..;...'] [--only attention]\n"
    "       gpu_check --device cpu --write-golden FILE [--train-precision fp32|bf16]\n"
    "                 [--train-model M --train-batch B ...]\n"
    "  --out DIR   gpu_check_report.md and gpu_check.json (default: $OUT, else .)\n"
    "  --att-tiles tile configurations (warps x tile x stages a pass, as SN_ATT_TILES) timed\n"
    "              one by one at the first --att-time shape, split into forward, dq and dk/dv;\n"
    "              \"dq=atomic\" in one: dq accumulated by the dk/dv kernel (atomic adds, not\n"
    "              bit-deterministic; the backward timed whole)\n"
    "  --only attention  the device step and the attention timings alone (a tuning run)\n"
    "  --small     sizes for a stand-in driver or the CPU: tiny models, a 256^3 GEMM, 16 MiB copies\n"
    "  --anchors DIR  bench/torch_gpt2.py's and torch_sdpa.py's JSON lines (torch_gpt2.jsonl,\n"
    "              torch_sdpa.jsonl) or torch_skip.txt, to report sinter's times as ratios of them\n";

static void defaults(gc_opts *o, bool small) {
    const char *out = getenv("OUT");
    *o = (gc_opts){.device = "cuda", .out_dir = out && *out ? out : ".", .att_T = 100,
                   .tiny_model = "tiny", .tiny_steps = 5, .train_model = "gpt2", .train_batch = 4,
                   .train_seq = 256, .train_steps = 20, .golden = SN_BENCH_DIR "/gpu_check_golden.txt",
                   .golden_bf16 = SN_BENCH_DIR "/gpu_check_golden_bf16.txt",
                   .time_model = "gpt2", .time_sizes = {{4, 256}, {16, 1024}}, .n_time_sizes = 2,
                   .time_steps = 10, .warmup = 3, .gemm_n = 8192, .copy_mib = 1024,
                   .att_shapes = {{16, 12, 1024, 64, 12}, {4, 12, 256, 64, 12}}, .n_att_shapes = 2,
                   .att_reps = 20};
    if (small) {
        o->att_T = 37;
        o->tiny_steps = 3;
        o->train_model = "tiny";
        o->train_batch = 2;
        o->train_seq = 32;
        o->train_steps = 5;
        o->golden = SN_BENCH_DIR "/gpu_check_golden_tiny.txt";
        o->golden_bf16 = SN_BENCH_DIR "/gpu_check_golden_tiny_bf16.txt";
        o->time_model = "tiny";
        o->time_sizes[0][0] = 2, o->time_sizes[0][1] = 32;
        o->n_time_sizes = 1;
        o->time_steps = 3;
        o->warmup = 2;
        o->gemm_n = 256;
        o->copy_mib = 16;
        o->att_shapes[0][0] = 1, o->att_shapes[0][1] = 2, o->att_shapes[0][2] = 64, o->att_shapes[0][3] = 64;
        o->att_shapes[0][4] = 2;
        o->n_att_shapes = 1;
        o->att_reps = 3;
    }
}

static int bad(const char *what) {
    fprintf(stderr, "gpu_check: %s\n%s", what, usage);
    return 2;
}

static int parse(int argc, char **argv, gc_opts *o) {
    bool small = false, sizes_given = false, att_given = false;
    for (int i = 1; i < argc; i++) small |= !strcmp(argv[i], "--small");
    /* (flags without a value: --small, --gemm-f32) */
    defaults(o, small);
    o->seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--small")) continue;
        if (!strcmp(k, "--gemm-f32")) {
            o->gemm_f32 = true;
            continue;
        }
        if (!v) return bad("an option lacks its value");
        i++;
        if (!strcmp(k, "--out")) o->out_dir = v;
        else if (!strcmp(k, "--device")) o->device = v;
        else if (!strcmp(k, "--cache-dir")) o->cache_dir = v;
        else if (!strcmp(k, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--train-model")) o->train_model = v;
        else if (!strcmp(k, "--train-batch")) o->train_batch = atoi(v);
        else if (!strcmp(k, "--train-seq")) o->train_seq = atoi(v);
        else if (!strcmp(k, "--train-steps")) o->train_steps = atoi(v);
        else if (!strcmp(k, "--golden")) o->golden = v;
        else if (!strcmp(k, "--golden-bf16")) o->golden_bf16 = v;
        else if (!strcmp(k, "--train-precision")) {
            if (!strcmp(v, "fp32")) o->train_precision = SN_PRECISION_FP32;
            else if (!strcmp(v, "bf16")) o->train_precision = SN_PRECISION_BF16;
            else return bad("--train-precision is fp32 or bf16");
        }
        else if (!strcmp(k, "--write-golden")) o->write_golden = v;
        else if (!strcmp(k, "--time-model")) o->time_model = v;
        else if (!strcmp(k, "--time-steps")) o->time_steps = atoi(v);
        else if (!strcmp(k, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(k, "--gemm-n")) o->gemm_n = atoi(v);
        else if (!strcmp(k, "--copy-mib")) o->copy_mib = atoi(v);
        else if (!strcmp(k, "--tiny-model")) o->tiny_model = v;
        else if (!strcmp(k, "--tiny-steps")) o->tiny_steps = atoi(v);
        else if (!strcmp(k, "--att-T")) o->att_T = atoi(v);
        else if (!strcmp(k, "--att-reps")) o->att_reps = atoi(v);
        else if (!strcmp(k, "--att-tiles")) o->att_tiles = v;
        else if (!strcmp(k, "--only")) {
            if (strcmp(v, "attention")) return bad("--only takes attention");
            o->only_attention = true;
        }
        else if (!strcmp(k, "--anchors")) o->anchors_dir = v;
        else if (!strcmp(k, "--att-time")) {
            if (!att_given) o->n_att_shapes = 0;
            att_given = true;
            int *a = o->att_shapes[o->n_att_shapes < 4 ? o->n_att_shapes : 3], got;
            if (o->n_att_shapes == 4 ||
                (got = sscanf(v, "%dx%dx%dx%d/%d", &a[0], &a[1], &a[2], &a[3], &a[4])) < 4 ||
                a[0] < 1 || a[1] < 1 || a[2] < 1 || a[3] < 1)
                return bad("--att-time is BxHxTxD or BxHxTxD/KV (KV heads for k and v; at most four "
                           "of them)");
            if (got == 4) a[4] = a[1];
            if (a[4] < 1 || a[1] % a[4])
                return bad("--att-time BxHxTxD/KV: KV must divide H (grouped-query attention)");
            o->n_att_shapes++;
        }
        else if (!strcmp(k, "--time-size")) {
            if (!sizes_given) o->n_time_sizes = 0;
            sizes_given = true;
            int B, T;
            if (o->n_time_sizes == 4 || sscanf(v, "%dx%d", &B, &T) != 2 || B < 1 || T < 1)
                return bad("--time-size is BxT (at most four of them)");
            o->time_sizes[o->n_time_sizes][0] = B;
            o->time_sizes[o->n_time_sizes++][1] = T;
        } else {
            return bad("unknown option");
        }
    }
    if (strcmp(o->device, "cuda") && strcmp(o->device, "cpu")) return bad("--device is cuda or cpu");
    if (o->warmup < 0 || o->train_batch < 1 || o->train_seq < 1 || o->train_steps < 1 || o->time_steps < 1 ||
        o->tiny_steps < 2 || o->att_T < 1 || o->att_reps < 1 || o->gemm_n < 0 || o->copy_mib < 0)
        return bad("sizes and step counts are positive (--tiny-steps at least 2)");
    return 0;
}

int main(int argc, char **argv) {
    static gc_run run;
    gc_run *r = &run;
    int rc = parse(argc, argv, &r->o);
    if (rc) return rc;
    if (r->o.write_golden) return gc_write_golden(&r->o);
    if (mkdir(r->o.out_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "gpu_check: cannot create %s: %s\n", r->o.out_dir, strerror(errno));
        return 2;
    }
    r->details = open_memstream(&r->details_buf, &r->details_len);
    if (!r->details) return 2;
    r->cuda = !strcmp(r->o.device, "cuda");
    printf("gpu_check: seed %llu (--seed %llu repeats these inputs)\n", (unsigned long long)r->o.seed,
           (unsigned long long)r->o.seed);

    gc_step *s = gc_begin(r, "device");
    sn_err e = {0};
    sn_status st;
    char cache[600];
    snprintf(cache, sizeof cache, "%s", r->o.cache_dir ? r->o.cache_dir : "");
    if (!r->o.cache_dir) snprintf(cache, sizeof cache, "%s/kernel-cache", r->o.out_dir);
    if (r->cuda) {
        int64_t total = 0;
        sn_cuda_opts co = {.cache_dir = cache};
        st = sn_cuda_memory_used(0, &r->mem_baseline, &total, &e);
        if (!st) st = sn_cuda_device_new_opts(0, &co, &r->dev, &e);
    } else {
        st = sn_cpu_device_new_opts(0, &(sn_cpu_opts){.cache_dir = cache}, &r->dev, &e);
    }
    if (st) { /* nothing else can run */
        snprintf(r->device_name, sizeof r->device_name, "none (%.200s)", e.msg);
        gc_end(r, s, GC_FAIL, "%s", e.msg);
    } else {
        snprintf(r->device_name, sizeof r->device_name, "%s", r->dev->name);
        sn_cuda_stats cs;
        sn_cuda_stats_get(r->dev, &cs);
        gc_num(s, "sm", cs.sm);
        gc_num(s, "memory_in_use_at_start", (double)r->mem_baseline);
        gc_end(r, s, GC_PASS, "%s", r->dev->name);
        if (!r->o.only_attention) {
            gc_measure_ceilings(r);
            gc_check_kernels(r);
            gc_check_tiny(r);
            gc_check_losses(r);
            gc_time_steps(r);
        }
        gc_time_attention(r);
        if (!r->o.only_attention || r->o.anchors_dir) gc_compare_anchors(r); /* --only: SDPA's */
        sn_device_free(r->dev);
        /* last, on its own handles: a fault of an unconfirmed layout (an illegal address
           poisons the context) can cost no other step */
        gc_check_wgmma(r);
    }
    bool wrote = gc_write_reports(r);
    fclose(r->details);
    free(r->details_buf);
    int failed = gc_failures(r);
    printf("gpu_check: %d of %d steps failed\n", failed, r->n_steps);
    return failed || !wrote ? 1 : 0;
}
