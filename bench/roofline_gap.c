/* roofline_gap.c: where a measured step departs from the roofline model, kernel by kernel
 * (roofline.h: sn_roofline_gemm_split, sn_roofline_print_gaps). The model prices a GEMM at its
 * FLOPs or its bytes; a real library also pays for shapes it tiles badly: a rank-8 product
 * (LoRA's x @ A, h @ B, and their gradients, whose output is 8 wide or whose K is), a long K
 * with a tiny output (dB = h^T dy: 8 x N summed over B*T rows) that needs split-K to fill the
 * machine. Those are the GEMMs this splits off as skinny, so that one profiled step on a GPU
 * says whether LoRA's step loses its time there (issue 21 item 4) without ncu. */

#include "ir/ir.h"
#include "roofline.h"

sn_roofline_gemm_shape sn_roofline_gemm_shape_of(const sn_kernel *k) {
    const sn_node *y = k->anchor, *a = y->in[0], *b = y->in[1];
    sn_roofline_gemm_shape s = {0};
    if (k->kind != SN_KER_GEMM || y->rank < 2) return s;
    s.n = y->shape[y->rank - 1];
    s.k = a->shape[a->rank - 1 - y->a.ta];
    if (b->rank == 2) { /* one GEMM: A's batch folded into its rows */
        s.batch = 1;
        s.m = sn_numel(y) / s.n;
    } else {
        s.m = y->shape[y->rank - 2];
        s.batch = sn_numel(y) / (s.m * s.n);
    }
    return s;
}

bool sn_roofline_gemm_skinny(const sn_kernel *k) {
    sn_roofline_gemm_shape s = sn_roofline_gemm_shape_of(k);
    return k->kind == SN_KER_GEMM && (s.m <= SN_ROOFLINE_SKINNY || s.n <= SN_ROOFLINE_SKINNY ||
                                      s.k <= SN_ROOFLINE_SKINNY);
}

sn_roofline_gemm_classes sn_roofline_gemm_split(const sn_program *p, const sn_roofline_machine *m,
                                                const sn_roofline_opts *o,
                                                const double *measured_kernel_s) {
    sn_roofline_gemm_classes c = {0};
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        if (k->kind != SN_KER_GEMM) continue;
        int j = sn_roofline_gemm_skinny(k) ? 0 : 1;
        sn_roofline_kernel r = sn_roofline_kernel_model(k, m, o);
        c.n[j]++;
        c.flops[j] += r.flops;
        c.bytes[j] += r.bytes;
        c.modeled_s[j] += r.time_s;
        if (measured_kernel_s) c.measured_s[j] += measured_kernel_s[i];
    }
    return c;
}

/* The `top` kernels whose measured time exceeds their modeled time the most, into idx (sorted,
 * largest first), and every kernel's excess summed into *total; returns how many are listed
 * (only kernels above their model). */
static int furthest(const sn_program *p, const sn_roofline_machine *m, const sn_roofline_opts *o,
                    const double *measured, int top, int *idx, double *gap, double *total) {
    int n = 0;
    *total = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        double g = measured[i] - sn_roofline_kernel_model(p->kernels[i], m, o).time_s;
        if (!(g > 0)) continue;
        *total += g;
        int at = n < top ? n++ : top;
        while (at > 0 && gap[at - 1] < g) {
            if (at < top) idx[at] = idx[at - 1], gap[at] = gap[at - 1];
            at--;
        }
        if (at < top) idx[at] = i, gap[at] = g;
    }
    return n;
}

static void print_us(FILE *f, double s) { fprintf(f, "%10.2f us", s * 1e6); }

void sn_roofline_print_gaps(FILE *f, const sn_program *p, const sn_roofline_machine *m,
                            const sn_roofline_opts *o, const double *measured_kernel_s, int top) {
    sn_roofline_gemm_classes c = sn_roofline_gemm_split(p, m, o, measured_kernel_s);
    static const char *const names[2] = {"skinny (a side <= 64)", "the rest"};
    fprintf(f, "  GEMMs by shape (skinny: M, N or K at most %d; LoRA's rank-r products):\n",
            SN_ROOFLINE_SKINNY);
    fprintf(f, "    %-22s %7s %12s %12s %13s %13s %7s\n", "class", "kernels", "GFLOP", "MB moved",
            "modeled", "measured", "gap");
    for (int j = 0; j < 2; j++) {
        if (!c.n[j]) continue;
        fprintf(f, "    %-22s %7d %12.2f %12.1f ", names[j], c.n[j], c.flops[j] / 1e9,
                c.bytes[j] / 1e6);
        print_us(f, c.modeled_s[j]);
        fputc(' ', f);
        print_us(f, c.measured_s[j]);
        fprintf(f, " %6.1fx\n", c.modeled_s[j] > 0 ? c.measured_s[j] / c.modeled_s[j] : 0);
    }
    enum { MAX_TOP = 64 };
    int idx[MAX_TOP];
    double gap[MAX_TOP];
    if (top > MAX_TOP) top = MAX_TOP;
    double total;
    int n = furthest(p, m, o, measured_kernel_s, top > 0 ? top : 0, idx, gap, &total);
    fprintf(f, "  kernels furthest above the model (measured - modeled; all kernels above it: "
            "%.3f ms):\n", total * 1e3);
    for (int i = 0; i < n; i++) {
        const sn_kernel *k = p->kernels[idx[i]];
        double mod = measured_kernel_s[idx[i]] - gap[i];
        char shape[64] = "";
        if (k->kind == SN_KER_GEMM) {
            sn_roofline_gemm_shape s = sn_roofline_gemm_shape_of(k);
            if (s.batch > 1)
                snprintf(shape, sizeof shape, "%lldx %lldx%lldx%lld", (long long)s.batch,
                         (long long)s.m, (long long)s.n, (long long)s.k);
            else
                snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)s.m, (long long)s.n,
                         (long long)s.k);
        }
        fprintf(f, "    %-40s %-9s %-20s", k->name, sn_kernel_kind_name(k->kind), shape);
        print_us(f, mod);
        fputc(' ', f);
        print_us(f, measured_kernel_s[idx[i]]);
        fprintf(f, " %6.1fx  +%.2f us\n", mod > 0 ? measured_kernel_s[idx[i]] / mod : 0,
                gap[i] * 1e6);
    }
}
