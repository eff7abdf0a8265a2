/* cuda_tail.c: a joined FINISH (kernel.h: tail; a norm weight gradient's or a thin sum's) in its
 * host's launch: the FINISH's body as a device function of its block index, the host's extra
 * parameters, and the dispatch at the top of the host that sends the blocks after the host's own
 * to it.
 * Convention: the host's own blocks are [0, n_items) (a norm backward pair: a block a chunk),
 * the tail's [n_items, n_items + sn_cu_tail_blocks); the tail's parameters are its buffers
 * (kernel.h) named tail_out<o> and tail_scratch, after the host's. */
#include "cuda_row.h"

/* The tail's sums: its columns (a norm's), or y's elements (a thin sum's: kernel.h). */
static int64_t width(const sn_kernel *f) {
    return f->kind == SN_KER_THIN ? sn_numel(f->anchor) : sn_sum_width(f);
}

/* Its scratch's shape, for the comments: the partial sums' (chunks, width), or the parts'. */
static void scratch_shape(const sn_kernel *f, char *buf, size_t len) {
    if (f->kind == SN_KER_THIN)
        snprintf(buf, len, "f32[%lld,%lld]: the parts' results", (long long)sn_split_parts(f),
                 (long long)width(f));
    else
        snprintf(buf, len, "f32[%lld,%lld]: partial sums", (long long)sn_sum_chunks(f),
                 (long long)width(f));
}

int64_t sn_cu_tail_blocks(const sn_kernel *k, unsigned threads) {
    return k->tail ? (width(k->tail) + threads - 1) / threads : 0;
}

/* `SN_DEVICE void fname(float *__restrict__ out0, .., const float *__restrict__ scratch,
 * const int block) {`: the FINISH's sums (f32) and partial sums, as its kernel names them. */
void sn_cu_tail_signature(sn_cu_text *t, const sn_kernel *f, const char *fname) {
    char shape[96];
    scratch_shape(f, shape, sizeof shape);
    sn_cu_emitf(t, "SN_DEVICE void %s(", fname);
    for (int o = 0; o < f->n_out; o++)
        sn_cu_emitf(t, "    float *__restrict__ out%d, /* f32[%lld] */", o, (long long)sn_numel(f->args[o]));
    sn_cu_emitf(t, "    const float *__restrict__ scratch, /* %s */", shape);
    sn_cu_emitf(t, "    const int block) {");
}

void sn_cu_emit_tail_fn(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    char name[96];
    snprintf(name, sizeof name, "%s_tail", fname);
    sn_cu_emitf(t, "/* the joined FINISH (%s): block `block` of its %lld (no kernel's name here: "
                "hosts of equal texts share one function) */", sn_op_name(k->tail->anchor->op),
                (long long)sn_cu_tail_blocks(k, d->block[0]));
    if (k->tail->kind == SN_KER_THIN) sn_cu_emit_parts_finish(t, k->tail, name, d->block[0]);
    else sn_cu_row_finish(t, k->tail, d, name, true);
}

void sn_cu_tail_params(sn_cu_text *t, const sn_kernel *k, int indent) {
    const sn_kernel *f = k->tail;
    char decl[96];
    for (int o = 0; o < f->n_out; o++) {
        snprintf(decl, sizeof decl, "float *__restrict__ tail_out%d,", o);
        sn_cu_emitf(t, "%-*s%-36s /* f32[%lld]: the joined FINISH's */", indent, "", decl,
                    (long long)sn_numel(f->args[o]));
    }
    SN_ASSERT(f->n_in == 0); /* a FINISH's args are its sums (kernel.h) */
    char shape[96];
    scratch_shape(f, shape, sizeof shape);
    sn_cu_emitf(t, "%-*s%-36s /* %s, its */", indent, "", "const float *__restrict__ tail_scratch)",
                shape);
}

void sn_cu_tail_dispatch(sn_cu_text *t, const sn_kernel *k, const char *fname) {
    const sn_kernel *f = k->tail;
    char call[256];
    size_t at = (size_t)snprintf(call, sizeof call, "%s_tail(", fname);
    for (int o = 0; o < f->n_out && at < sizeof call; o++)
        at += (size_t)snprintf(call + at, sizeof call - at, "tail_out%d, ", o);
    SN_ASSERT(at < sizeof call);
    sn_cu_emitf(t, "/* the blocks after this kernel's own: the joined FINISH's */");
    sn_cu_emitf(t, "if (blockIdx.x >= %lld) {", (long long)k->n_items);
    sn_cu_emitf(t, "%stail_scratch, (int)blockIdx.x - %lld);", call, (long long)k->n_items);
    sn_cu_emitf(t, "return;");
    sn_cu_emitf(t, "}");
}
