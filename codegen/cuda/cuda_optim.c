/* cuda_optim.c: the optimizer update as CUDA C: AdamW on fp32 master weights and moments, in
 * place, four elements a step (float4) and a scalar tail. Convention: today's SN_KER_ADAMW kernel
 * is the trainer's one kernel for every parameter (kernel.h: buffers p, m, v, g, hyper[8]), so
 * its text is size-free: the element count is a trailing `long long n` parameter and the launch
 * covers k->n_items elements (sn_cuda_launch_dims); the hyperparameters are read from the device
 * buffer once per thread, so one compiled kernel serves every step. Over one flat parameter
 * block (the optimizer redesign on branch `house`) the same text is the single multi-tensor
 * launch of the step. */
#include <stdio.h>

#include "cuda_int.h"

sn_status sn_cu_check_optim(const sn_kernel *k, sn_err *e) {
    SN_ASSERT(k->kind == SN_KER_ADAMW);
    for (int i = 0; i < k->n_out + k->n_in; i++)
        if (k->args[i]->dtype != SN_F32)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: AdamW keeps f32 weights, "
                           "moments and gradients; %%%d is %s", k->name, k->args[i]->id,
                           sn_dtype_name(k->args[i]->dtype));
    return SN_OK;
}

void sn_cu_emit_optim(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    (void)k;
    static const char *const body[] = {
        "/* g' = g grad_scale; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;",
        " * p -= lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd p) */",
        "const float lr = hyper[0], beta1 = hyper[1], beta2 = hyper[2], eps = hyper[3];",
        "const float wd = hyper[4], bc1 = hyper[5], bc2 = hyper[6], grad_scale = hyper[7];",
        "const long long n4 = n / 4;",
        "for (long long i = sn_thread_index(); i < n4; i += sn_thread_count()) {",
        "const float4 g4 = reinterpret_cast<const float4 *>(g)[i];",
        "float4 p4 = reinterpret_cast<float4 *>(p)[i];",
        "float4 m4 = reinterpret_cast<float4 *>(m)[i];",
        "float4 v4 = reinterpret_cast<float4 *>(v)[i];",
        "sn_adamw_step(&p4.x, &m4.x, &v4.x, g4.x, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);",
        "sn_adamw_step(&p4.y, &m4.y, &v4.y, g4.y, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);",
        "sn_adamw_step(&p4.z, &m4.z, &v4.z, g4.z, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);",
        "sn_adamw_step(&p4.w, &m4.w, &v4.w, g4.w, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);",
        "reinterpret_cast<float4 *>(p)[i] = p4;",
        "reinterpret_cast<float4 *>(m)[i] = m4;",
        "reinterpret_cast<float4 *>(v)[i] = v4;",
        "}",
        "for (long long i = 4 * n4 + sn_thread_index(); i < n; i += sn_thread_count()) /* the tail */",
        "    sn_adamw_step(&p[i], &m[i], &v[i], g[i], lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);",
    };
    sn_cu_emitf(t, "/* one AdamW step on the elements of one parameter (or one flat block) */");
    sn_cu_emitf(t, "SN_DEVICE void sn_adamw_step(float *p, float *m, float *v, float g, float lr,");
    sn_cu_emitf(t, "                             float beta1, float beta2, float eps, float wd,");
    sn_cu_emitf(t, "                             float bc1, float bc2, float grad_scale) {");
    sn_cu_emitf(t, "const float gs = g * grad_scale;");
    sn_cu_emitf(t, "const float m1 = beta1 * *m + (1.0f - beta1) * gs;");
    sn_cu_emitf(t, "const float v1 = beta2 * *v + (1.0f - beta2) * (gs * gs);");
    sn_cu_emitf(t, "const float update = (m1 / bc1) / (sqrtf(v1 / bc2) + eps) + wd * *p;");
    sn_cu_emitf(t, "*p = *p - lr * update;");
    sn_cu_emitf(t, "*m = m1;");
    sn_cu_emitf(t, "*v = v1;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%u)", d->block[0]);
    sn_cu_emitf(t, "%s(float *__restrict__ p, float *__restrict__ m, float *__restrict__ v,", fname);
    sn_cu_emitf(t, "    const float *__restrict__ g, const float *__restrict__ hyper, long long n)");
    sn_cu_emitf(t, "{");
    for (size_t i = 0; i < sizeof body / sizeof body[0]; i++) sn_cu_emitf(t, "%s", body[i]);
    sn_cu_emitf(t, "}");
}
