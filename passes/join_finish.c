/* join_finish.c: horizontal fusion of a norm weight gradient's FINISH kernel (kernel.h: tail)
 * into the launch of the next norm backward pair (and of a thin sum's into the next thin
 * product's, below), so that the tiny FINISH (a few microseconds on 60-84 blocks of a GPU)
 * costs no launch of its own: gpt2's step has 25 norm backward pairs
 * in a row of layers, and 24 of their FINISH kernels ride in the next pair's launch.
 * Convention: the FINISH leaves the program's list and becomes the host's tail; every sum keeps
 * its order (a FINISH thread adds one column's chunks in chunk order whatever its block), so
 * the results are the separate kernels' bits.
 *
 * Why this host. In a GPT-2 backward, layer L's ln_2 pair is followed by its FINISH, the MLP's
 * GEMMs, the attention backward, the attention's GEMMs, then layer L's ln_1 pair and its FINISH,
 * then layer L-1's MLP GEMMs and its ln_2 pair. Of the two designs weighed, (a) the next row
 * kernel in the order that may host it and (b) the pair of the layer below by name, (a) is
 * chosen: it needs no knowledge of layers (the walk forward finds ln_1's pair for ln_2's FINISH
 * and the layer below's ln_2 pair for ln_1's), and it checks, for any program, what makes the
 * move safe: no kernel up to the host touches the FINISH's sums or writes its scratch. The
 * attention kernels (shared-memory tiling, registers near the limit) and the GEMMs (library
 * calls) cannot host; a pair can: 256 threads a block, the FINISH's columns a thread each, no
 * atomics. The step's last FINISH has no pair after it and stays a kernel.
 *
 * The thin products' sums (LoRA's weight gradients, kernel.h SN_KER_THIN sum) are split in
 * two as well, and their FINISH (a thread an element of y adding the parts in order, whatever
 * its block) rides in the next thin product's launch the same way: in a LoRA backward every
 * adapter's sums are followed by its other thin products (dy B^T, the expansion dh A^T), so
 * 95 of gpt2's 96 find a host, and each saves a launch of a few microseconds. */
#include <string.h>

#include "passes.h"

/* The value whose buffer node x's is (through aliases). */
static int root(const sn_program *p, const sn_node *x) {
    int v = p->value_of[x->id];
    while (v >= 0 && p->values[v].alias >= 0) v = p->values[v].alias;
    return v;
}

/* Whether f is a FINISH that may ride in a later launch: a norm weight gradient's, or a thin
 * product's sum form's (kernel.h: tail). */
static bool joinable(const sn_kernel *f) {
    if (f->stage != SN_SUM_FINISH || f->anchor2) return false;
    if (f->kind == SN_KER_THIN) return true;
    return f->kind == SN_KER_ROW &&
           (f->anchor->op == SN_OP_LAYERNORM_BWD_W || f->anchor->op == SN_OP_RMSNORM_BWD_W);
}

/* Whether k may carry FINISH kernel f's tail: a kernel of f's kind without one (a norm
 * backward pair for a norm's; a thin product not itself a FINISH for a thin sum's) whose buffers
 * and f's fit one launch. */
static bool may_host(const sn_kernel *k, const sn_kernel *f) {
    bool kind = f->kind == SN_KER_THIN ? k->kind == SN_KER_THIN && k->stage != SN_SUM_FINISH
                                       : k->kind == SN_KER_ROW && k->row.pair;
    return kind && !k->tail && sn_kernel_n_bufs(k) + sn_kernel_n_bufs(f) <= SN_KER_MAX_BUFS;
}

/* Whether k touches one of f's sums (reads or writes its buffer), or writes f's scratch. */
static bool conflicts(const sn_program *p, const sn_kernel *k, const sn_kernel *f) {
    for (int a = 0; a < k->n_out + k->n_in; a++)
        for (int o = 0; o < f->n_out; o++)
            if (root(p, k->args[a]) == root(p, f->args[o])) return true;
    if (k->stage == SN_SUM_PARTIAL && k->scratch == f->scratch) return true;
    return k->tail && conflicts(p, k->tail, f);
}

sn_status sn_join_finish(sn_program *p, sn_err *e) {
    sn_kernel **ks = p->kernels;
    for (int i = 0; i < p->n_kernels; i++) {
        sn_kernel *f = ks[i];
        if (!joinable(f)) continue;
        int h = -1; /* the host: every kernel up to it may run before f */
        for (int j = i + 1; j < p->n_kernels && h < 0 && !conflicts(p, ks[j], f); j++)
            if (may_host(ks[j], f)) h = j;
        if (h < 0) continue;
        ks[h]->tail = f;
        sn_status st = sn_kernel_check(ks[h], e);
        if (st) return st;
        /* the weight shadows' kernels follow the step's in the one array (program.h) */
        memmove(ks + i, ks + i + 1, sizeof *ks * (size_t)(p->n_kernels + p->n_shadows - i - 1));
        p->n_kernels--;
        p->shadows = ks + p->n_kernels;
        i--;
    }
    return SN_OK;
}
