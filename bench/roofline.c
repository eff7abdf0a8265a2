/* roofline.c: the roofline model of roofline.h. Bytes are each distinct argument of a kernel
 * once (views that fuse folded read their whole buffer: an upper bound for those, the fewest
 * bytes for the rest); the optimizer step (not in the program: the trainer adds it) is modeled
 * from the parameter count as SQNORM (read g), CLIP (tiny) and ADAMW (read g, p, m, v; write
 * p, m, v), all f32, and the weights' 16-bit copies AdamW writes where the program has them. */
#include "roofline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "ir/ir.h"
#include "program/target.h"

static const sn_roofline_machine machines[] = {
    /* H100 SXM, dense (no sparsity); its GEMMs' efficiency and overhead assumed the H200's */
    {"h100", 989.0, 494.5, 67.0, 3.35, 132, 55.0, 7.0, 5.0, 0.9, 10.0, 1979.0},
    /* H200: bf16 GEMM and copy bandwidth as gpu_check measured them on 2026-11-27 (cuBLASLt
     * 8192^3; a 1 GiB device copy); TF32 and fp32 the published (H100 SXM's) numbers; FP8
     * twice the measured bf16 (the published ratio; not measured) */
    {"h200", 773.0, 494.5, 67.0, 4.22, 132, 55.0, 7.0, 5.0, 0.9, 10.0, 1546.0},
    /* the consumer parts this project is for (NVIDIA's Ampere and Ada whitepapers, dense, bf16
     * with fp32 accumulation: half the f16-accumulate rate on GeForce); PCIe 4.0 x16 assumed 25
     * GB/s each way; floors and GEMM efficiency assumed the H200's. Not measured. */
    {"rtx3090", 71.0, 35.6, 35.6, 0.936, 82, 25.0, 7.0, 5.0, 0.9, 10.0, 0.0},
    {"rtx4090", 165.2, 82.6, 82.6, 1.008, 128, 25.0, 7.0, 5.0, 0.9, 10.0, 330.3},
};

const sn_roofline_machine *sn_roofline_machine_find(const char *name) {
    for (size_t i = 0; i < sizeof machines / sizeof machines[0]; i++)
        if (name && !strcmp(name, machines[i].name)) return &machines[i];
    return NULL;
}

static double node_bytes(const sn_node *n) {
    return (double)sn_numel(n) * sn_dtype_bits(n->dtype) / 8.0;
}

double sn_roofline_kernel_flops(const sn_kernel *k) {
    const sn_node *n = k->anchor;
    if (k->kind == SN_KER_GEMM || k->kind == SN_KER_THIN) { /* THIN: fmaf on the FP32 units */
        if (k->stage == SN_SUM_FINISH) return 0; /* the thin sum's: adding its parts */
        const sn_node *a = n->in[0];
        return 2.0 * (double)sn_numel(n) * (double)a->shape[a->rank - 1 - n->a.ta];
    }
    if (k->kind == SN_KER_ATTENTION) {
        /* the products are the one kernel's or its PARTIAL's: not the atomic dq's zero and
           store, nor a FINISH adding parts */
        if (k->stage == SN_SUM_FINISH || (k->stage == SN_SUM_PARTIAL && n->op == SN_OP_ATTENTION_BWD_Q))
            return 0;
        const sn_node *q = n->in[0], *kk = n->in[1];
        double T = (double)q->shape[q->rank - 2], S = (double)kk->shape[kk->rank - 2];
        double D = (double)q->shape[q->rank - 1], bh = (double)sn_numel(q) / (T * D);
        double pairs = T * (T + 1) / 2 + T * (n->op == SN_OP_ATTENTION_CACHE ? S : S - T);
        /* products per pair: forward q.k and p.v; dq: s, dp, ds.k; dk with dv: s, dp, ds.q, p.do
           (and ds.k with the atomic dq: a PARTIAL dk/dv kernel not in parts, kernel.h) */
        int products = n->op == SN_OP_ATTENTION || n->op == SN_OP_ATTENTION_CACHE ? 2 : n->op == SN_OP_ATTENTION_BWD_V ? 2 : 3;
        if (n->op == SN_OP_ATTENTION_BWD_K && k->anchor2) products = 4;
        if (n->op != SN_OP_ATTENTION_BWD_Q && k->stage == SN_SUM_PARTIAL && !k->dkv_parts) products++;
        return bh * pairs * D * 2.0 * products;
    }
    return 0; /* counted as per-element work below, not as model FLOPs */
}

/* The elementwise work of a non-GEMM kernel: its instructions (or 5 for a row op, 1 for a
 * gather or a reduction) per element of its largest argument (a gather's: of its output). */
static double other_flops(const sn_kernel *k) {
    double elems = 0;
    for (int a = 0; a < k->n_out + k->n_in; a++)
        if ((double)sn_numel(k->args[a]) > elems) elems = (double)sn_numel(k->args[a]);
    if (k->kind == SN_KER_GATHER && k->anchor->op == SN_OP_EMBEDDING) /* the rows it copies */
        elems = (double)sn_numel(k->anchor);
    double per = k->kind == SN_KER_POINTWISE ? (k->n_instr > 0 ? k->n_instr : 1)
                 : k->kind == SN_KER_ROW ? 5 + k->n_instr : 1;
    return elems * per;
}

static double kernel_bytes(const sn_kernel *k) {
    /* the atomic dq's zero reads o and dout (the dots) and writes its scratch, its store reads
       the scratch and writes dq; the dk/dv kernel reads the dots, not o */
    bool att = k->kind == SN_KER_ATTENTION && k->anchor->op != SN_OP_ATTENTION_CACHE;
    bool dq_stage = att && k->anchor->op == SN_OP_ATTENTION_BWD_Q && k->stage != SN_SUM_WHOLE;
    if (dq_stage && k->stage == SN_SUM_PARTIAL)
        return (double)sn_kernel_scratch_bytes(k) + node_bytes(k->anchor->in[3]) +
               node_bytes(k->anchor->in[4]);
    int skip = -1; /* o's arg in the atomic dq's dk/dv kernel, unless another input shares it */
    if (att && k->anchor->op != SN_OP_ATTENTION_BWD_Q && k->stage == SN_SUM_PARTIAL &&
        !k->dkv_parts && k->n_access > 3) {
        skip = k->access[3].arg;
        for (int i = 0; i < k->anchor->n_in && i < k->n_access; i++)
            if (i != 3 && k->access[i].arg == skip) skip = -1;
    }
    if (k->stage == SN_SUM_FINISH && (sn_split_parts(k) > 1 || k->dkv_parts || dq_stage)) {
        double b = (double)sn_kernel_scratch_bytes(k); /* the decode split's FINISH, or dk and */
        for (int o = 0; o < k->n_out; o++) b += node_bytes(k->args[o]); /* dv's sum: the parts */
        return b; /* in, the outputs out */
    }
    double b = 0;
    for (int a = 0; a < k->n_out + k->n_in; a++) {
        bool seen = (a < k->n_out && !sn_kernel_writes(k, a)) || a == skip; /* a PARTIAL's sums */
        for (int j = 0; j < a; j++) seen |= k->args[j] == k->args[a];
        int op = a - k->n_out; /* a GEMM operand read in place reads its view's elements */
        bool view = k->kind == SN_KER_GEMM && op >= 0 && op < 2 && k->gemm.view[op].ld;
        /* a gather reads the table's rows its ids name, at most the whole table (decode's one
           token reads one row of wte, not its 154 MB) */
        bool table = k->kind == SN_KER_GATHER && k->anchor->op == SN_OP_EMBEDDING && op >= 0 &&
                     k->args[a] == k->anchor->in[0];
        double rows = table ? (double)sn_numel(k->anchor) * sn_dtype_bits(k->args[a]->dtype) / 8 : 0;
        double whole = node_bytes(view ? k->anchor->in[op] : k->args[a]);
        if (!seen) b += table && rows < whole ? rows : whole;
    }
    b += (double)sn_kernel_scratch_bytes(k); /* partial sums, or embedding_bwd's buckets */
    return k->tail ? b + kernel_bytes(k->tail) : b; /* a joined FINISH's (kernel.h) */
}

/* The causal tiles of 64 (keys, or queries for dk/dv) that the busiest block of attention
 * kernel k walks, over those of all its blocks: every slice walks the same, the first keys' block
 * of dk and dv in one kernel each query tile of all G heads of its group (kernel.h). */
static double att_busiest_share(const sn_kernel *k) {
    const sn_node *n = k->anchor, *q = n->in[0], *kk = n->in[1];
    int r = q->rank;
    int64_t T = q->shape[r - 2], S = kk->shape[r - 2], nq = (T + 63) / 64, nk = (S + 63) / 64;
    bool kv = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V;
    const sn_node *by = kv && !(k->dkv_parts && k->stage == SN_SUM_PARTIAL) ? kk : q;
    int64_t loop = kv && !k->dkv_parts ? sn_attention_group(n) : 1;
    int64_t slices = sn_shape_numel(r - 2, by->shape); /* the blocks' y: (batch x head) pairs */
    double most = 0, total = 0;
    for (int64_t b = 0; b < (kv ? nk : nq); b++) {
        int64_t tiles;
        if (kv) { /* query i sees key j when i >= j - (S - T) */
            int64_t first = (b * 64 - (S - T)) / 64;
            tiles = loop * (nq - (first > 0 ? first : 0));
        } else { /* the block's last query sees keys up to its index + S - T */
            int64_t last = (b * 64 + 64 < T ? b * 64 + 64 : T) + S - T;
            tiles = (last + 63) / 64 < nk ? (last + 63) / 64 : nk;
        }
        most = tiles > most ? (double)tiles : most;
        total += (double)tiles;
    }
    return total > 0 ? most / (total * (double)slices) : 0;
}

/* A block of the attention kernels runs at most a third of an SM: one warpgroup's chain of
 * products and exponentials (on an H200, 2026-11-28: smollm2-135m's dk/dv block of 48 query tiles
 * took 147 us, 3.1 us a tile, where gpt2's blocks, 3 an SM, took 3.8 us a tile each). */
enum { ATT_BLOCKS_SM = 3 };

/* The share of a kernel's work that its busiest block does, which one SM must do alone: a
 * kernel that sums over every row in one block (a serial row op not split in stages:
 * cross-entropy's mean loss;
 * kernel.h) gives that block the anchor's per-element inputs, the rest of its blocks (column
 * sums) the rest; other kernels split their work evenly over the blocks of their CUDA launch.
 * GEMMs are the library's, which fills the machine. */
static double busiest_share(const sn_kernel *k, double bytes) {
    if (k->kind == SN_KER_GEMM || bytes <= 0) return 0;
    const sn_row_facts *f = k->kind == SN_KER_ROW ? sn_row_facts_of(k->anchor->op) : NULL;
    if (f && f->serial && k->stage == SN_SUM_WHOLE) {
        double own = 0;
        for (int i = 0; i < k->anchor->n_in; i++)
            if (sn_row_operand_per_element(k->anchor->op, i)) own += node_bytes(k->anchor->in[i]);
        return own < bytes ? own / bytes : 1;
    }
    if (k->kind == SN_KER_ATTENTION && k->anchor->op != SN_OP_ATTENTION_CACHE &&
        sn_roofline_kernel_flops(k) > 0) /* the tiles' products, a third of an SM a block */
        return att_busiest_share(k) * ATT_BLOCKS_SM;
    sn_target t = sn_target_cuda(90);
    sn_cuda_dims d = sn_cuda_launch_dims(k, &t);
    double blocks = (double)d.grid[0] * d.grid[1] * d.grid[2];
    return blocks >= 1 ? 1 / blocks : 1;
}

/* The rate a kernel's FLOPs run at, TFLOP/s. */
static double kernel_peak(const sn_kernel *k, const sn_roofline_machine *m, const sn_roofline_opts *o) {
    if (k->kind == SN_KER_GEMM || k->kind == SN_KER_ATTENTION) {
        sn_dtype dt = k->anchor->in[0]->dtype;
        if (sn_dtype_is_f8(dt) && m->fp8_tflops > 0) return m->fp8_tflops;
        if (dt == SN_BF16 || dt == SN_F16 || sn_dtype_is_f8(dt)) return m->bf16_tflops;
        if (k->kind == SN_KER_GEMM && o && o->tf32) return m->tf32_tflops;
    }
    return m->fp32_tflops;
}

sn_roofline_kernel sn_roofline_kernel_model(const sn_kernel *k, const sn_roofline_machine *m,
                                            const sn_roofline_opts *o) {
    sn_roofline_kernel r = {0};
    r.flops = sn_roofline_kernel_flops(k);
    if (r.flops == 0) r.flops = other_flops(k);
    r.bytes = kernel_bytes(k);
    double tc = r.flops / (kernel_peak(k, m, o) * 1e12), tm = r.bytes / (m->tb_per_s * 1e12);
    if (k->kind == SN_KER_GEMM && m->gemm_eff > 0) tc /= m->gemm_eff; /* the library's (roofline.h) */
    r.compute_bound = tc > tm;
    r.time_s = tc > tm ? tc : tm;
    if (k->kind == SN_KER_GEMM) r.time_s += m->gemm_overhead_us * 1e-6;
    /* the busiest block on one SM, at its share of the machine (pessimistic: one SM can draw
     * more than 1/SMs of the bandwidth, but not the whole) */
    double alone = busiest_share(k, r.bytes) * m->sms * r.time_s;
    if (alone > r.time_s) {
        r.time_s = alone;
        r.sm_bound = true;
    }
    double floor = (k->kind == SN_KER_GEMM ? m->gemm_floor_us : m->kernel_floor_us) * 1e-6;
    if (floor > r.time_s) {
        r.time_s = floor;
        r.floor_bound = true;
    }
    return r;
}

sn_roofline_step sn_roofline_program(const sn_program *p, int64_t n_params,
                                     const sn_roofline_machine *m, const sn_roofline_opts *o) {
    sn_roofline_step s = {0};
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        sn_roofline_kernel r = sn_roofline_kernel_model(k, m, o);
        s.flops += r.flops;
        s.bytes += r.bytes;
        s.time_s += r.time_s;
        s.model_flops += sn_roofline_kernel_flops(k);
        s.kind_s[k->kind] += r.time_s;
        s.kind_bytes[k->kind] += r.bytes;
        s.kind_flops[k->kind] += r.flops;
    }
    /* SQNORM reads g; ADAMW reads g, p, m, v and writes p, m, v: 8 f32 per parameter, and
       with weight shadows (program.h) the 16-bit copies: 2 bytes more */
    s.optimizer_bytes = (8.0 * 4.0 + (p->n_shadows ? 2.0 : 0.0)) * (double)n_params;
    double opt_flops = 14.0 * (double)n_params;
    double tc = opt_flops / (m->fp32_tflops * 1e12), tm = s.optimizer_bytes / (m->tb_per_s * 1e12);
    s.optimizer_s = tc > tm ? tc : tm;
    s.flops += opt_flops;
    s.bytes += s.optimizer_bytes;
    s.time_s += s.optimizer_s;
    return s;
}

static void fmt_s(char *buf, size_t len, double s) {
    if (s >= 1) snprintf(buf, len, "%8.3f s ", s);
    else if (s >= 1e-3) snprintf(buf, len, "%8.3f ms", s * 1e3);
    else snprintf(buf, len, "%8.2f us", s * 1e6);
}

/* The few kernels modeled slowest, each with its time and share of the step. */
static void print_slowest(FILE *f, const sn_program *p, const sn_roofline_machine *m,
                          const sn_roofline_opts *o, double step_s) {
    enum { SHOW = 6 };
    int top[SHOW];
    double top_s[SHOW];
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        double t = sn_roofline_kernel_model(p->kernels[i], m, o).time_s;
        int at = n < SHOW ? n++ : SHOW;
        while (at > 0 && top_s[at - 1] < t) {
            if (at < SHOW) top[at] = top[at - 1], top_s[at] = top_s[at - 1];
            at--;
        }
        if (at < SHOW) top[at] = i, top_s[at] = t;
    }
    fprintf(f, "  slowest kernels:\n");
    char t[32];
    for (int i = 0; i < n; i++) {
        const sn_kernel *k = p->kernels[top[i]];
        sn_roofline_kernel r = sn_roofline_kernel_model(k, m, o);
        fmt_s(t, sizeof t, r.time_s);
        fprintf(f, "    %-40s %s %5.1f%%%s\n", k->name, t, 100 * r.time_s / step_s,
                r.sm_bound ? "  (one block's share on one SM)" : "");
    }
}

void sn_roofline_print(FILE *f, const sn_program *p, int64_t n_params, double tokens,
                       const sn_roofline_machine *m, const sn_roofline_opts *o,
                       const double *measured_kind_s, double measured_step_s) {
    sn_roofline_step s = sn_roofline_program(p, n_params, m, o);
    int count[SN_KER_KIND_COUNT] = {0};
    for (int i = 0; i < p->n_kernels; i++) count[p->kernels[i]->kind]++;
    fprintf(f, "roofline on %s (%.1f TFLOP/s bf16 dense, %.1f TF32, %.1f fp32, %.2f TB/s), f32 GEMMs as %s:\n",
            m->name, m->bf16_tflops, m->tf32_tflops, m->fp32_tflops, m->tb_per_s,
            o && o->tf32 ? "TF32" : "fp32");
    fprintf(f, "  %-10s %7s %12s %12s %12s %6s%s\n", "kind", "kernels", "GFLOP", "MB moved",
            "modeled", "share", measured_kind_s ? "     measured   gap" : "");
    char t[32], mt[32];
    for (int k = 0; k < SN_KER_KIND_COUNT; k++) {
        if (!count[k]) continue;
        fmt_s(t, sizeof t, s.kind_s[k]);
        fprintf(f, "  %-10s %7d %12.2f %12.1f %s %5.1f%%", sn_kernel_kind_name((sn_kernel_kind)k),
                count[k], s.kind_flops[k] / 1e9, s.kind_bytes[k] / 1e6, t,
                100 * s.kind_s[k] / s.time_s);
        if (measured_kind_s) {
            fmt_s(mt, sizeof mt, measured_kind_s[k]);
            fprintf(f, "  %s %5.1fx", mt, s.kind_s[k] > 0 ? measured_kind_s[k] / s.kind_s[k] : 0);
        }
        fputc('\n', f);
    }
    if (n_params) {
        fmt_s(t, sizeof t, s.optimizer_s);
        fprintf(f, "  %-10s %7d %12.2f %12.1f %s %5.1f%%\n", "optimizer", 2, 14.0 * n_params / 1e9,
                s.optimizer_bytes / 1e6, t, 100 * s.optimizer_s / s.time_s);
    }
    print_slowest(f, p, m, o, s.time_s);
    fmt_s(t, sizeof t, s.time_s);
    double gemm_peak = o && o->tf32 ? m->tf32_tflops : m->fp32_tflops;
    fprintf(f, "  step: %.1f GFLOP (GEMMs and attention %.1f), %.1f MB, modeled %s = %.0f tokens/s; "
            "MFU %.1f%% of the bf16 peak, %.1f%% of the %s peak the f32 GEMMs run at\n",
            s.flops / 1e9, s.model_flops / 1e9, s.bytes / 1e6, t, tokens / s.time_s,
            100 * s.model_flops / s.time_s / (m->bf16_tflops * 1e12),
            100 * s.model_flops / s.time_s / (gemm_peak * 1e12), o && o->tf32 ? "TF32" : "fp32");
    if (measured_step_s > 0)
        fprintf(f, "  measured step %.3f ms: %.2fx the modeled time, MFU %.1f%% of the bf16 peak\n",
                measured_step_s * 1e3, measured_step_s / s.time_s,
                100 * s.model_flops / measured_step_s / (m->bf16_tflops * 1e12));
}

typedef struct {
    int after; /* the last kernel writing the chunk (-1: none) */
    double bytes;
} ready_chunk;

static int by_after(const void *a, const void *b) {
    const ready_chunk *x = a, *y = b;
    return (x->after > y->after) - (x->after < y->after);
}

/* The gradients' download during the run (runner.c's run copies): chunk c of the flat range
 * (chunk elements) queued when the last kernel that writes it ends, the kernels back to back at
 * their modeled times, one copy stream at bw bytes/s; the seconds left after the last kernel. */
static double download_tail(const sn_program *p, int64_t n_params, int64_t chunk,
                            const sn_roofline_machine *m, const sn_roofline_opts *o, double bw,
                            double f) {
    int64_t chunks = chunk > 0 ? (n_params + chunk - 1) / chunk : 0;
    double *end = malloc(sizeof *end * ((size_t)p->n_kernels + 1));
    ready_chunk *c = malloc(sizeof *c * ((size_t)chunks + 1));
    if (!end || !c) {
        free(end);
        free(c);
        return 4.0 * (double)n_params / bw; /* no memory for the model: all of it after */
    }
    double t = 0;
    for (int k = 0; k < p->n_kernels; k++) end[k] = t += f * sn_roofline_kernel_model(p->kernels[k], m, o).time_s;
    for (int64_t i = 0; i < chunks; i++) {
        int64_t len = n_params - i * chunk < chunk ? n_params - i * chunk : chunk;
        c[i] = (ready_chunk){sn_program_last_write(p, p->layout.grads + 4 * i * chunk, 4 * len),
                             4.0 * (double)len};
    }
    qsort(c, (size_t)chunks, sizeof *c, by_after); /* the order the run queues them */
    double free_at = 0;
    for (int64_t i = 0; i < chunks; i++)
        free_at = fmax(free_at, c[i].after >= 0 ? end[c[i].after] : 0) + c[i].bytes / bw;
    free(end);
    free(c);
    return fmax(0, free_at - t);
}

/* The weights going up during the step's run (train/offload.h sn_offload_pieces, as the runner
 * sends them): each piece, in their order on one stream at bw bytes/s, once its last kernel has
 * ended and the host's update (host_s from the step's start, done part by part in the same
 * order at an even rate an element) has done its part. The last upload's end from the step's
 * start. */
static double upload_end(const sn_program *p, int64_t chunk, const sn_roofline_machine *m,
                         const sn_roofline_opts *o, double bw, double f, double host_s,
                         const sn_offload_seg *seg, int n_seg) {
    int64_t flat_n = p->layout.flat_n;
    double *end = malloc(sizeof *end * ((size_t)p->n_kernels + 1));
    sn_offload_piece *c = NULL;
    sn_offload_range *parts = NULL;
    int n = 0, n_parts = 0;
    sn_err e;
    double *done = NULL; /* elements the update has done when part j is */
    if (end && !sn_offload_pieces(p, seg, n_seg, chunk, &c, &n, &parts, &n_parts, &e))
        done = malloc(sizeof *done * ((size_t)n_parts + 1));
    if (!done || flat_n <= 0) {
        free(end), free(c), free(parts), free(done);
        return host_s + 4.0 * (double)flat_n / bw; /* no memory for the model: all of it after */
    }
    double t = 0, sum = 0;
    for (int k = 0; k < p->n_kernels; k++) end[k] = t += f * sn_roofline_kernel_model(p->kernels[k], m, o).time_s;
    for (int j = 0; j < n_parts; j++) done[j] = sum += (double)parts[j].n;
    double free_at = 0;
    for (int i = 0; i < n; i++)
        free_at = fmax(fmax(free_at, c[i].after >= 0 ? end[c[i].after] : 0),
                       host_s * done[c[i].part] / (double)flat_n) +
                  (double)(c[i].low ? 2 : 4) * (double)c[i].n / bw;
    free(end), free(c), free(parts), free(done);
    return free_at;
}

sn_roofline_offload sn_roofline_offload_model(const sn_program *p, int64_t n_params, int64_t chunk,
                                              const sn_roofline_machine *m,
                                              const sn_roofline_opts *o, double host_gb_s,
                                              const sn_offload_seg *seg, int n_seg) {
    int64_t low_n = 0;
    for (int i = 0; seg && i < n_seg; i++) low_n += seg[i].low ? seg[i].n : 0;
    sn_roofline_step s = sn_roofline_program(p, n_params, m, o);
    double n = (double)n_params, bw = m->pcie_gb_s * 1e9;
    /* the kernels' times scaled so that the on-device step is the measured one, if given */
    double kernels = s.time_s - s.optimizer_s, f = 1;
    if (o->device_step_s > s.optimizer_s && kernels > 0) f = (o->device_step_s - s.optimizer_s) / kernels;
    sn_roofline_offload r = {.on_device_s = f * kernels + s.optimizer_s, .kernel_scale = f};
    r.device_s = f * kernels + 4.0 * n / (m->tb_per_s * 1e12); /* SQNORM reads g */
    r.down_s = 4.0 * n / bw;
    r.low_frac = n > 0 ? (double)low_n / n : 0;
    r.up_s = (4.0 * (n - (double)low_n) + 2.0 * (double)low_n) / bw;
    r.host_s = (28.0 * n + 2.0 * (double)low_n) / (host_gb_s * 1e9); /* + the shadows' bits */
    r.serial_s = r.down_s + r.host_s + r.up_s;
    double slowest = fmax(fmax(r.down_s, r.host_s), r.up_s), share = n > 0 ? (double)chunk / n : 0;
    r.overlapped_s = slowest + share * (r.down_s + r.host_s + r.up_s - slowest);
    r.step_s = r.device_s + r.overlapped_s;
    r.tail_s = download_tail(p, n_params, chunk, m, o, bw, f);
    r.down_end_s = f * kernels + r.tail_s;
    r.delayed_s = fmax(r.down_end_s, fmax(r.device_s, r.host_s) + r.up_s);
    r.delayed_serial_s = r.delayed_s - r.device_s;
    r.delayed_after_s = fmax(r.device_s, r.host_s) + fmax(r.down_s, r.up_s);
    double up_end = upload_end(p, chunk, m, o, bw, f, r.host_s, seg, n_seg);
    r.delayed_run_s = fmax(fmax(r.down_end_s, r.device_s), up_end);
    r.up_left_s = fmax(0, up_end - r.device_s);
    double d2d = 2 * 2 * 4.0 * n / (m->tb_per_s * 1e12); /* two copies, each read and written */
    r.buffered_s = fmax(r.device_s + d2d, r.overlapped_s);
    return r;
}

void sn_roofline_offload_print(FILE *f, const sn_roofline_offload *r, double tokens,
                               double host_gb_s, const sn_roofline_machine *m) {
    char t[6][32];
    const double v[6] = {r->device_s, r->down_s, r->up_s, r->host_s, r->serial_s, r->overlapped_s};
    for (int i = 0; i < 6; i++) fmt_s(t[i], sizeof t[i], v[i]);
    fprintf(f, "offloaded (the optimizer state on the host; PCIe %.0f GB/s each way, host AdamW "
            "%.1f GB/s):\n", m->pcie_gb_s, host_gb_s);
    if (r->kernel_scale != 1)
        fprintf(f, "  the kernels' modeled times x %.3f: the step without offload %.3f ms as "
                "measured (--device-ms)\n", r->kernel_scale, r->on_device_s * 1e3);
    fprintf(f, "  device kernels and SQNORM %s; gradients down %s, weights up %s (%.1f%% of them as "
            "16-bit shadows), host AdamW %s\n", t[0], t[1], t[2],
            100 * r->low_frac, t[3]);
    fprintf(f, "  optimizer phase: serial %s, overlapped %s\n", t[4], t[5]);
    fprintf(f, "  step: modeled %.3f ms = %.0f tokens/s, %.2fx the step without offload "
            "(serial copies: %.2fx)\n", r->step_s * 1e3, tokens / r->step_s,
            r->step_s / r->on_device_s, (r->device_s + r->serial_s) / r->on_device_s);
    sn_roofline_offload_delay_print(f, r, host_gb_s);
    double room = 1.5 * r->on_device_s - r->device_s; /* what 1.5x leaves the optimizer phase */
    if (room <= fmax(r->down_s, r->up_s))
        fprintf(f, "  1.5x is out of reach: the copies alone take more than %.3f ms\n", room * 1e3);
    else
        fprintf(f, "  1.5x needs the host AdamW at %.0f GB/s or more\n",
                r->host_s * host_gb_s / room);
}

void sn_roofline_offload_delay_print(FILE *f, const sn_roofline_offload *r, double host_gb_s) {
    fprintf(f, "  delayed update (--offload-delay), host AdamW at %.1f GB/s: the gradients down "
            "during the backward (%.3f ms of it after the last kernel), then max(device %.3f, "
            "host %.3f) + weights up %.3f = %.3f ms, %.2fx the step without offload (after the "
            "device's step: %.3f ms; with the gradients down after the step %.3f ms, %.2fx); "
            "with the weights and gradients double-buffered on the device (+8 bytes a parameter, "
            "not built): %.3f ms, %.2fx\n", host_gb_s, r->tail_s * 1e3, r->device_s * 1e3,
            r->host_s * 1e3, r->up_s * 1e3, r->delayed_s * 1e3, r->delayed_s / r->on_device_s,
            r->delayed_serial_s * 1e3, r->delayed_after_s * 1e3,
            r->delayed_after_s / r->on_device_s, r->buffered_s * 1e3,
            r->buffered_s / r->on_device_s);
    fprintf(f, "  delayed, the weights up during the step's run (sn_trainer_step, the CLI): "
            "%.3f ms, %.2fx the step without offload (%.3f ms of the uploads after the device's "
            "step)\n", r->delayed_run_s * 1e3, r->delayed_run_s / r->on_device_s, r->up_left_s * 1e3);
    double room = 1.5 * r->on_device_s - r->up_s; /* what 1.5x leaves the host */
    if (room <= r->device_s || r->down_end_s > 1.5 * r->on_device_s)
        fprintf(f, "  delayed: 1.5x is out of reach: the device's step and the copies take %.3f ms\n",
                fmax(r->down_end_s, r->device_s + r->up_s) * 1e3);
    else
        fprintf(f, "  delayed: 1.5x needs the host AdamW at %.0f GB/s or more\n",
                r->host_s * host_gb_s / room);
}
