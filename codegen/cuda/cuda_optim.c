/* cuda_optim.c: the optimizer step over the flat parameter range as CUDA C (kernel.h: GRAD_ACC,
 * SQNORM, CLIP, ADAMW and their buffers): one launch of each does every parameter at once (the
 * multi-tensor launch), in place, f32 weights and moments, four elements a step (float4) and a
 * scalar tail; AdamW with flat_low also stores the new weights' 16-bit copies, four a step in
 * one 8-byte store. The squared norm is deterministic: a block per SN_SQNORM_BLOCK elements writes
 * its partial sum (a tree in the block), and CLIP adds the partials in f64 in a fixed tree.
 * Convention: every hyper-parameter is read from the device's scalar buffer at each launch, so
 * one compiled kernel serves every step; flat_n and flat_decay are fixed in the text. */
#include <stdio.h>

#include "cuda_int.h"

#define E(...) sn_cu_emitf(t, __VA_ARGS__)

/* sum[i] += g[i] */
static void grad_acc(sn_cu_text *t, const sn_kernel *k, const char *ix) {
    E("const %s n4 = %lld; /* float4 steps; then %lld elements */", ix, (long long)(k->opt.flat_n / 4),
      (long long)(k->opt.flat_n % 4));
    E("for (%s i = sn_thread_index(); i < n4; i += sn_thread_count()) {", ix);
    E("float4 s = reinterpret_cast<float4 *>(sum)[i];");
    E("const float4 x = reinterpret_cast<const float4 *>(g)[i];");
    E("s.x += x.x;");
    E("s.y += x.y;");
    E("s.z += x.z;");
    E("s.w += x.w;");
    E("reinterpret_cast<float4 *>(sum)[i] = s;");
    E("}");
    E("for (%s i = 4 * n4 + sn_thread_index(); i < %lld; i += sn_thread_count()) sum[i] += g[i];",
      ix, (long long)k->opt.flat_n);
}

/* partial[b] = sum over block b's elements of (g * inv_micro)^2 */
static void sqnorm(sn_cu_text *t, const sn_kernel *k, const char *ix, unsigned threads) {
    E("const float inv_micro = scal[%d];", SN_OPT_INV_MICRO);
    E("const %s lo = (%s)blockIdx.x * %d;", ix, ix, SN_SQNORM_BLOCK);
    E("const %s hi = lo + %d < %lld ? lo + %d : %lld;", ix, SN_SQNORM_BLOCK, (long long)k->opt.flat_n,
      SN_SQNORM_BLOCK, (long long)k->opt.flat_n);
    E("float acc = 0.0f;");
    E("for (%s i = lo + threadIdx.x; i < hi; i += %u) {", ix, threads);
    E("const float x = g[i] * inv_micro;");
    E("acc += x * x;");
    E("}");
    E("acc = sn_block_sum(acc);");
    E("if (threadIdx.x == 0) partial[blockIdx.x] = acc;");
}

/* the norm from the partials (f64), and the clip scale */
static void clip(sn_cu_text *t, const sn_kernel *k, unsigned threads) {
    int64_t nb = (k->opt.flat_n + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK;
    E("double acc = 0.0;");
    E("for (int b = threadIdx.x; b < %lld; b += %u) acc += (double)partial[b];", (long long)nb, threads);
    E("SN_SHARED(double, tree, %u);", threads);
    E("tree[threadIdx.x] = acc;");
    E("__syncthreads();");
    E("/* a fixed tree: the same sum every run */");
    E("for (int half = %u; half > 0; half /= 2) {", threads / 2);
    E("if ((int)threadIdx.x < half) tree[threadIdx.x] += tree[threadIdx.x + half];");
    E("__syncthreads();");
    E("}");
    E("if (threadIdx.x == 0) {");
    E("const double norm = sqrt(tree[0]), limit = (double)scal[%d];", SN_OPT_CLIP);
    E("scal[%d] = (float)norm;", SN_OPT_NORM);
    E("scal[%d] = (float)(limit > 0.0 && norm > limit ? limit / norm : 1.0);", SN_OPT_SCALE);
    E("}");
}

static void adamw(sn_cu_text *t, const sn_kernel *k, const char *ix) {
    E("/* g' = g inv_micro scale; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;");
    E(" * p -= lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd p), wd on the first %lld elements */",
      (long long)k->opt.flat_decay);
    E("const float lr = scal[%d], beta1 = scal[%d], beta2 = scal[%d], eps = scal[%d];", SN_OPT_LR,
      SN_OPT_BETA1, SN_OPT_BETA2, SN_OPT_EPS);
    E("const float wd = scal[%d], bc1 = scal[%d], bc2 = scal[%d];", SN_OPT_WD, SN_OPT_BC1, SN_OPT_BC2);
    E("const float gscale = scal[%d], inv_micro = scal[%d];", SN_OPT_SCALE, SN_OPT_INV_MICRO);
    E("const %s n4 = %lld; /* float4 steps; then %lld elements */", ix, (long long)(k->opt.flat_n / 4),
      (long long)(k->opt.flat_n % 4));
    E("for (%s i = sn_thread_index(); i < n4; i += sn_thread_count()) {", ix);
    E("const float4 g4 = reinterpret_cast<const float4 *>(g)[i];");
    E("float4 p4 = reinterpret_cast<float4 *>(p)[i];");
    E("float4 m4 = reinterpret_cast<float4 *>(m)[i];");
    E("float4 v4 = reinterpret_cast<float4 *>(v)[i];");
    static const char lane[4] = {'x', 'y', 'z', 'w'};
    for (int l = 0; l < 4; l++)
        E("sn_adamw_step(&p4.%c, &m4.%c, &v4.%c, g4.%c * inv_micro * gscale, 4 * i + %d < %lld ? wd : "
          "0.0f, lr, beta1, beta2, eps, bc1, bc2);", lane[l], lane[l], lane[l], lane[l], l,
          (long long)k->opt.flat_decay);
    E("reinterpret_cast<float4 *>(p)[i] = p4;");
    E("reinterpret_cast<float4 *>(m)[i] = m4;");
    E("reinterpret_cast<float4 *>(v)[i] = v4;");
    const char *pack = k->opt.flat_low == SN_BF16 ? "sn_pack_bf16x2" : "sn_pack_f16x2";
    if (k->opt.flat_low != SN_F32) /* the 16-bit copies of the four */
        E("reinterpret_cast<uint2 *>(low)[i] = make_uint2(%s(p4.x, p4.y), %s(p4.z, p4.w));", pack, pack);
    E("}");
    E("/* the tail */");
    E("for (%s i = 4 * n4 + sn_thread_index(); i < %lld; i += sn_thread_count()) {", ix,
      (long long)k->opt.flat_n);
    E("sn_adamw_step(&p[i], &m[i], &v[i], g[i] * inv_micro * gscale, i < %lld ? wd : 0.0f, lr, "
      "beta1, beta2, eps, bc1, bc2);", (long long)k->opt.flat_decay);
    if (k->opt.flat_low != SN_F32)
        E("low[i] = %s(p[i]);", k->opt.flat_low == SN_BF16 ? "sn_f32_to_bf16" : "sn_f32_to_f16");
    E("}");
}

void sn_cu_emit_optim(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    const char *ix = sn_cu_index_type(k->opt.flat_n + 4LL * SN_CUDA_PW_BLOCK * SN_CUDA_PW_MAX_GRID);
    unsigned threads = d->block[0];
    if (k->kind == SN_KER_ADAMW) { /* its one element's update, before the kernel (once in a
                                      module of several AdamW kernels) */
        E("#ifndef SN_ADAMW_STEP");
        E("#define SN_ADAMW_STEP");
        E("SN_DEVICE void sn_adamw_step(float *p, float *m, float *v, float g, float wd, float lr,");
        E("                            float beta1, float beta2, float eps, float bc1, float bc2) {");
        E("const float m1 = beta1 * *m + (1.0f - beta1) * g;");
        E("const float v1 = beta2 * *v + (1.0f - beta2) * (g * g);");
        E("const float update = (m1 / bc1) / (sqrtf(v1 / bc2) + eps) + wd * *p;");
        E("*p = *p - lr * update;");
        E("*m = m1;");
        E("*v = v1;");
        E("}");
        E("#endif");
    }
    /* AdamW asks for 5 blocks an SM (the 47 registers a thread it takes on sm_80 and sm_90):
       without a count ptxas aimed at 6 blocks of 256 on sm_86 and sm_89 (1536 threads an SM)
       and spilled 28 bytes at 40 registers */
    if (k->kind == SN_KER_ADAMW) E("extern \"C\" __global__ void __launch_bounds__(%u, 5)", threads);
    else E("extern \"C\" __global__ void __launch_bounds__(%u)", threads);
    switch (k->kind) {
    case SN_KER_GRAD_ACC:
        E("%s(float *__restrict__ sum, const float *__restrict__ g) /* [%lld] */", fname, (long long)k->opt.flat_n);
        E("{");
        grad_acc(t, k, ix);
        break;
    case SN_KER_SQNORM:
        E("%s(float *__restrict__ partial, const float *__restrict__ g, const float *__restrict__ scal)", fname);
        E("{");
        sqnorm(t, k, ix, threads);
        break;
    case SN_KER_CLIP:
        E("%s(float *__restrict__ scal, const float *__restrict__ partial)", fname);
        E("{");
        clip(t, k, threads);
        break;
    case SN_KER_ADAMW:
        E("%s(float *__restrict__ p, float *__restrict__ m, float *__restrict__ v,", fname);
        if (k->opt.flat_low == SN_F32)
            E("    const float *__restrict__ g, const float *__restrict__ scal) /* [%lld] */",
              (long long)k->opt.flat_n);
        else
            E("    const float *__restrict__ g, const float *__restrict__ scal, %s *__restrict__ low) "
              "/* [%lld] */", k->opt.flat_low == SN_BF16 ? "sn_bf16" : "sn_f16", (long long)k->opt.flat_n);
        E("{");
        adamw(t, k, ix);
        break;
    default: SN_ASSERT(0);
    }
    E("}");
}
