/* join_siblings.c: horizontal fusion of pointwise kernels: a pointwise kernel right after
 * another of the same index space that reads none of its outputs joins it, one launch where
 * there were two. The cases that matter are a value cut into parts by slices that nothing
 * else reads, each part a copy kernel of the same shape (LoRA's shared A product's gradient
 * cut into the adapters' dA: three kernels for LLaMA's q, k, v, two for gate, up; the slices of
 * a bias gradient): each is a few microseconds of launch on a GPU for a few KiB.
 * Convention: the joined kernel's outputs are the first's then the second's, its inputs the
 * first's then the second's not among them; every element is computed by the same
 * instructions as before (the second's renumbered after the first's), so the results are the
 * separate kernels' bits. Kernels with a tail or a stage (kernel.h) are left alone. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* Whether pointwise kernel b may join a (b right after it): the same index space, no output of
 * a read by b, their args, accesses and instructions together within a kernel's. */
static bool may_join(const sn_kernel *a, const sn_kernel *b) {
    if (a->kind != SN_KER_POINTWISE || b->kind != SN_KER_POINTWISE || a->tail || b->tail ||
        a->stage != SN_SUM_WHOLE || b->stage != SN_SUM_WHOLE || a->rank != b->rank ||
        memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) != 0 ||
        a->n_instr + b->n_instr > SN_KER_MAX_INSTR || a->n_access + b->n_access > SN_KER_MAX_ARGS)
        return false;
    int args = a->n_out + a->n_in + b->n_out;
    for (int j = b->n_out; j < b->n_out + b->n_in; j++) {
        bool shared = false;
        for (int i = 0; i < a->n_out + a->n_in; i++) {
            if (a->args[i] != b->args[j]) continue;
            if (i < a->n_out) return false; /* b reads what a writes */
            shared = true;
        }
        args += !shared;
    }
    return args <= SN_KER_MAX_ARGS;
}

/* a's arg index of node x, appending it as an input when absent. */
static int arg_of(sn_kernel *a, const sn_node *x) {
    for (int i = a->n_out; i < a->n_out + a->n_in; i++)
        if (a->args[i] == x) return i;
    a->args[a->n_out + a->n_in] = x;
    return a->n_out + a->n_in++;
}

/* b joined into a (may_join). */
static sn_status join(sn_program *p, sn_kernel *a, const sn_kernel *b, sn_err *e) {
    sn_pw_instr *instr = sn_arena_alloc(&p->arena, sizeof *instr * (size_t)(a->n_instr + b->n_instr));
    sn_access *access = sn_arena_alloc(&p->arena, sizeof *access * (size_t)(a->n_access + b->n_access + 1));
    if (!instr || !access) return sn_fail_oom(e, sizeof *instr, "the join_siblings pass");
    /* a's inputs move up by b's outputs, which follow a's */
    for (int i = a->n_out + a->n_in - 1; i >= a->n_out; i--) a->args[i + b->n_out] = a->args[i];
    for (int o = 0; o < b->n_out; o++) {
        a->args[a->n_out + o] = b->args[o];
        a->store[a->n_out + o] = b->store[o] + a->n_instr;
    }
    memcpy(access, a->access, sizeof *access * (size_t)a->n_access);
    for (int x = 0; x < a->n_access; x++)
        if (access[x].arg >= a->n_out) access[x].arg += b->n_out;
    a->n_out += b->n_out;
    for (int x = 0; x < b->n_access; x++) {
        sn_access *to = &access[a->n_access + x];
        *to = b->access[x];
        to->arg = to->arg < b->n_out ? a->n_out - b->n_out + to->arg : arg_of(a, b->args[to->arg]);
    }
    memcpy(instr, a->instr, sizeof *instr * (size_t)a->n_instr);
    for (int i = 0; i < b->n_instr; i++) {
        sn_pw_instr *to = &instr[a->n_instr + i];
        *to = b->instr[i];
        for (int j = 0; j < to->n_in; j++)
            to->in[j].index += to->in[j].kind == SN_REF_INSTR ? a->n_instr
                               : to->in[j].kind == SN_REF_ACCESS ? a->n_access : 0;
    }
    a->instr = instr;
    a->access = access;
    a->n_instr += b->n_instr;
    a->n_access += b->n_access;
    const char *rest = strchr(b->name, '_'); /* "k12_slice": "_slice" */
    size_t len = strlen(a->name);
    if (rest && len + strlen(rest) < sizeof a->name) snprintf(a->name + len, sizeof a->name - len, "%s", rest);
    sn_kernel_work(a, &a->n_items, &a->serial);
    return sn_kernel_check(a, e);
}

sn_status sn_join_siblings(sn_program *p, int *n_joined, sn_err *e) {
    sn_kernel **ks = p->kernels;
    *n_joined = 0;
    for (int i = 0; i + 1 < p->n_kernels; i++) {
        while (i + 1 < p->n_kernels && may_join(ks[i], ks[i + 1])) {
            sn_status st = join(p, ks[i], ks[i + 1], e);
            if (st) return st;
            /* the weight shadows' kernels follow the step's in the one array (program.h) */
            memmove(ks + i + 1, ks + i + 2, sizeof *ks * (size_t)(p->n_kernels + p->n_shadows - i - 2));
            p->n_kernels--;
            p->shadows = ks + p->n_kernels;
            ++*n_joined;
        }
    }
    return SN_OK;
}
