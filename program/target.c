/* target.c: the published limits of each CUDA architecture, and the host CPU's. Sources: the CUDA
 * C Programming Guide's "Technical Specifications per Compute Capability" table. */
#include "target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sn_target sn_target_cuda(int sm) {
    SN_ASSERT(sm >= 75);
    sn_target t = {.kind = SN_TARGET_CUDA, .sm = sm, .native_f16 = true, .mma_f16 = true,
                   .native_bf16 = sm >= 80, .mma_bf16 = sm >= 80, .tf32 = sm >= 80,
                   .mma_fp8 = sm >= 89,
                   .warp_size = 32, .max_block_threads = 1024, .shared_default = 48 << 10,
                   .join_finish = true, .split_decode = true, .att_dkv_parts = true,
                   .fuse_siblings = true, .dgelu_accum_unfused = true, .dgelu_min_elems = 1 << 23,
                   .row_cache = !sn_target_row_cache_off(), .row_prefetch = !sn_target_row_prefetch_off(),
                   .thin_products = !sn_target_thin_off(), .thin_sums = !sn_target_thin_sums_off()};
    /* shared memory a block may opt into: 8.6 and 8.9 (the RTX 30 and 40 series) and 12.x (the
       RTX 50 series, consumer Blackwell) have 99 KiB, 9.0 and 10.x 227 KiB, 8.0 and 8.7 163 KiB;
       a real device's own figure replaces it (runtime/cuda/device.c) */
    t.shared_max = sm == 75                          ? 64 << 10
                   : sm == 80 || sm == 87            ? 163 << 10
                   : sm >= 90 && sm < 120            ? 227 << 10
                                                     : 99 << 10;
    snprintf(t.name, sizeof t.name, "cuda sm_%d", sm);
    return t;
}

bool sn_target_att_dq_atomic_asked(void) {
    const char *env = getenv("SN_ATT_TILES");
    for (const char *at = env ? strstr(env, "dq=atomic") : NULL; at; at = strstr(at + 1, "dq=atomic"))
        if ((at == env || at[-1] == ',') && (at[9] == 0 || at[9] == ',' || at[9] == '@')) return true;
    return false;
}

bool sn_target_accum_plain_asked(void) {
    const char *env = getenv("SN_GEMM_ACCUM");
    return env && !strcmp(env, "plain");
}

bool sn_target_accum_dgelu_asked(void) {
    const char *env = getenv("SN_GEMM_ACCUM");
    return env && !strcmp(env, "dgelu");
}

bool sn_target_decode_split_off(void) {
    const char *env = getenv("SN_DECODE_SPLIT");
    return env && !strcmp(env, "0");
}

bool sn_target_att_parts_off(void) {
    const char *env = getenv("SN_ATT_PARTS");
    return env && !strcmp(env, "0");
}

bool sn_target_row_cache_off(void) {
    const char *env = getenv("SN_ROW_CACHE");
    return env && !strcmp(env, "0");
}

bool sn_target_row_prefetch_off(void) {
    const char *env = getenv("SN_ROW_PREFETCH");
    return env && !strcmp(env, "0");
}

bool sn_target_thin_off(void) {
    const char *env = getenv("SN_THIN");
    return env && !strcmp(env, "0");
}

bool sn_target_thin_sums_off(void) {
    const char *env = getenv("SN_THIN");
    return env && (!strcmp(env, "0") || !strcmp(env, "nosum"));
}

bool sn_target_gemv_nf4_only_asked(void) {
    const char *env = getenv("SN_GEMV");
    return env && !strcmp(env, "nf4");
}

static bool cpu_has_avx512_bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

sn_target sn_target_cpu(void) {
    /* the GELU and its gradient in the JIT's vector pointwise kernels: the CPU device's GEMM
       epilogue evaluates them element by element with libm's tanhf (program/epilogue.h, the
       stand-in cuBLASLt's formulas), which cost gpt2 bf16 B=2 T=64 on one thread 826 against
       658 ms a full training step and 458 against 282 a LoRA one (2026-11-28, in turn) */
    sn_target t = {.kind = SN_TARGET_CPU, .warp_size = 1, .max_block_threads = 1,
                   .native_bf16 = cpu_has_avx512_bf16(), .gelu_unfused = true};
    snprintf(t.name, sizeof t.name, "cpu%s", t.native_bf16 ? " (bf16 dot products)" : "");
    return t;
}

const char *sn_precision_name(sn_precision p) {
    static const char *const names[] = {"fp32", "bf16", "fp16", "tf32"};
    _Static_assert(sizeof names / sizeof names[0] == SN_PRECISION_COUNT, "a name per precision");
    return (unsigned)p < SN_PRECISION_COUNT ? names[p] : "?";
}

int sn_precision_parse(const char *s) {
    for (int p = 0; p < SN_PRECISION_COUNT; p++)
        if (!strcmp(s, sn_precision_name((sn_precision)p))) return p;
    return -1;
}

sn_precision sn_target_default_precision(const sn_target *t) {
    if (t->kind != SN_TARGET_CUDA) return SN_PRECISION_FP32;
    return t->native_bf16 ? SN_PRECISION_BF16 : SN_PRECISION_FP16;
}
