/* program.c: the compiled program's printout and its release, and what kernel.h says of row
 * ops (which operands and results a ROW kernel may fuse); the program's passes are fuse.c and
 * memplan.c. */
#include <stdlib.h>
#include <string.h>

#include "program.h"

const char *sn_kernel_kind_name(sn_kernel_kind k) {
    static const char *names[] = {"pointwise", "row", "reduce", "gemm", "attention", "gather",
                                  "grad_acc", "sqnorm", "clip", "adamw"};
    _Static_assert(sizeof names / sizeof names[0] == SN_KER_KIND_COUNT, "a kernel kind without a name");
    SN_ASSERT((unsigned)k < SN_KER_KIND_COUNT);
    return names[k];
}

int sn_kernel_n_bufs(const sn_kernel *k) {
    switch (k->kind) {
    case SN_KER_GRAD_ACC: case SN_KER_CLIP: return 2;
    case SN_KER_SQNORM: return 3;
    case SN_KER_ADAMW: return 5;
    default: return k->n_out + k->n_in;
    }
}

bool sn_row_operand_per_element(sn_op op, int i) {
    switch (op) {
    case SN_OP_SOFTMAX: case SN_OP_LAYERNORM: case SN_OP_RMSNORM: case SN_OP_CAUSAL_MASK:
    case SN_OP_CROSS_ENTROPY: case SN_OP_CROSS_ENTROPY_BWD: return i == 0;
    case SN_OP_SOFTMAX_BWD: case SN_OP_LAYERNORM_BWD_W: case SN_OP_RMSNORM_BWD_W: return i == 0 || i == 1;
    case SN_OP_LAYERNORM_BWD: case SN_OP_RMSNORM_BWD: return i == 0 || i == 2;
    default: return false;
    }
}

bool sn_row_result_per_element(sn_op op) {
    switch (op) {
    case SN_OP_SOFTMAX: case SN_OP_SOFTMAX_BWD: case SN_OP_LAYERNORM: case SN_OP_RMSNORM:
    case SN_OP_LAYERNORM_BWD: case SN_OP_RMSNORM_BWD: case SN_OP_CAUSAL_MASK:
    case SN_OP_CROSS_ENTROPY_BWD: return true;
    default: return false;
    }
}

void sn_kernel_describe(const sn_kernel *k, char *buf, size_t len) {
    char t[96];
    size_t at = (size_t)snprintf(buf, len, "%-40s %-9s %s <-", k->name, sn_kernel_kind_name(k->kind),
                                 k->args[0] ? sn_type_str(k->args[0], t, sizeof t) : "?");
    for (int i = k->n_out; i < k->n_out + k->n_in && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, " %%%d", k->args[i]->id);
    if (at < len) at += (size_t)snprintf(buf + at, len - at, " ->");
    for (int i = 0; i < k->n_out && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, " %%%d", k->args[i]->id);
}

static void print_bytes(FILE *f, const char *what, int64_t b) {
    fprintf(f, "# %s %.2f MiB (%lld bytes)\n", what, (double)b / (1 << 20), (long long)b);
}

void sn_program_print(const sn_program *p, FILE *f) {
    int count[SN_KER_KIND_COUNT] = {0};
    char line[512];
    for (int k = 0; k < p->n_kernels; k++) {
        sn_kernel_describe(p->kernels[k], line, sizeof line);
        fprintf(f, "%s\n", line);
        count[p->kernels[k]->kind]++;
    }
    fprintf(f, "# %d kernels:", p->n_kernels);
    for (int i = 0; i < SN_KER_KIND_COUNT; i++)
        if (count[i]) fprintf(f, " %d %s", count[i], sn_kernel_kind_name((sn_kernel_kind)i));
    fprintf(f, "\n");
    if (!p->sum_bytes && !p->persistent_bytes) return; /* not planned yet */
    print_bytes(f, "arena (planned peak)", p->arena_bytes);
    print_bytes(f, "arena values without reuse", p->sum_bytes);
    print_bytes(f, "persistent (inputs, parameters, outputs)", p->persistent_bytes);
}

void sn_program_free(sn_program *p) {
    if (!p) return;
    sn_arena_free(&p->arena);
    free(p->kernels);
    free(p->values);
    free(p->value_of);
    free(p);
}
