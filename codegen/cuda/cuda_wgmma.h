/* cuda_wgmma.h: the warpgroup-MMA GEMM kernel's text (cuda_wgmma.c). */
#ifndef SN_CUDA_WGMMA_H
#define SN_CUDA_WGMMA_H

/* The CUDA C of kernel "sn_wgmma_gemm": c (M x N, f32) = a (M x K) b^T, bf16 (f16 with
 * SN_GEMM_F16 defined before it), b (N x K) or with TRANS_B 1 (K x N); grid (N / 64, M / 64),
 * 128 threads, SN_WGMMA_GEMM_SHARED bytes of dynamic shared memory; M, N, K multiples of 64.
 * Needs sm_90a on a GPU. */
const char *sn_cuda_wgmma_gemm_source(void);
#define SN_WGMMA_GEMM_SHARED (2 * 8192 + 1024)

/* The kernel's layouts, each checked on the simulator (tests/test_wgmma.c) and on a GPU
 * (runtime/cuda/wgmma_check.c): the #defines that select it, its input type, b's layout. */
typedef struct {
    const char *name, *defines;
    int f16, trans_b;
} sn_wgmma_form;
extern const sn_wgmma_form sn_wgmma_gemm_forms[];
extern const int sn_wgmma_gemm_n_forms;

#endif
