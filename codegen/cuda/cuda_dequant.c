/* cuda_dequant.c: the dequantize of NF4 weights (ir/nf4.h) as CUDA C: y (the node's shape, f32,
 * bf16 or f16) from the packed bytes, a thread a weight over a grid-stride loop.
 * Convention: the 16 levels go to shared memory (SN_SHARED) once a block; each weight's scale is
 * fmaf(code, step, mean) (one rounding, as ir/nf4.h defines it) and the weight one f32 product
 * of its level and the scale, stored through sn_store (16-bit: rounded to nearest even), so the
 * kernel equals sn_nf4_dequantize bit for bit. Fusing the unpacking into the GEMM that reads it
 * (a prologue of a GEMM of ours) is later work: cuBLASLt reads the unpacked weights. */
#include <stdio.h>

#include "cuda_int.h"
#include "ir/nf4.h"

sn_status sn_cu_check_dequant(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    if (n->dtype != SN_F32 && n->dtype != SN_BF16 && n->dtype != SN_F16)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: NF4 weights dequantized to %s: the "
                       "CUDA kernel writes f32, bf16 or f16", k->name, sn_dtype_name(n->dtype));
    return SN_OK;
}

void sn_cu_emit_nf4_levels(sn_cu_text *t) {
    char lit[32], levels[16 * 24];
    size_t at = 0;
    for (int i = 0; i < 16; i++)
        at += (size_t)snprintf(levels + at, sizeof levels - at, "%s%s",
                               sn_cu_float_lit(sn_nf4_levels[i], lit, sizeof lit), i < 15 ? ", " : "");
    sn_cu_emitf(t, "if (threadIdx.x < 16) {");
    sn_cu_emitf(t, "const float levels[16] = {%s};", levels);
    sn_cu_emitf(t, "level[threadIdx.x] = levels[threadIdx.x];");
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_dequant(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    const sn_node *n = k->anchor;
    sn_nf4_layout l = sn_nf4_layout_of(sn_numel(n));
    const char *ix = sn_cu_index_type(l.bytes + 2LL * d->block[0] * d->grid[0]);
    sn_cu_emit_signature(t, k, fname, (int)d->block[0]);
    sn_cu_emitf(t, "/* %lld weights: %lld blocks of %d, %lld groups of %d scales (ir/nf4.h) */",
                (long long)l.n, (long long)l.blocks, SN_NF4_BLOCK, (long long)l.groups,
                SN_NF4_SCALE_GROUP);
    sn_cu_emitf(t, "SN_SHARED(float, level, 16);");
    sn_cu_emit_nf4_levels(t);
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "const float mean = *reinterpret_cast<const float *>(in0);");
    sn_cu_emitf(t, "const float *step = reinterpret_cast<const float *>(in0 + %lld);",
                (long long)l.off_steps);
    sn_cu_emitf(t, "const signed char *scale_code = reinterpret_cast<const signed char *>(in0 + %lld);",
                (long long)l.off_scale_codes);
    sn_cu_emitf(t, "const unsigned char *code = in0 + %lld;", (long long)l.off_codes);
    sn_cu_emitf(t, "for (%s i = sn_thread_index(); i < %lld; i += sn_thread_count()) {", ix,
                (long long)l.n);
    sn_cu_emitf(t, "const %s b = i / %d; /* the block */", ix, SN_NF4_BLOCK);
    sn_cu_emitf(t, "const float scale = fmaf((float)scale_code[b], step[b / %d], mean);",
                SN_NF4_SCALE_GROUP);
    sn_cu_emitf(t, "const unsigned byte = code[i / 2];");
    sn_cu_emitf(t, "sn_store(&out0[i], level[i %% 2 ? byte & 15u : byte >> 4] * scale);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
