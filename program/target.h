/* target.h: what a device can do, as the passes and the code generators need to know it (the
 * shape of tinygrad's Renderer: shared memory, tensor cores, native dtypes). Convention: no pass
 * or generator tests a device name or an #ifdef; it reads one of these, made by the device (or,
 * for compiling without one, by sn_target_cpu / sn_target_cuda). */
#ifndef SN_TARGET_H
#define SN_TARGET_H

#include "ir/ir.h"

typedef enum { SN_TARGET_CPU, SN_TARGET_CUDA, SN_TARGET_KIND_COUNT } sn_target_kind;

typedef struct {
    sn_target_kind kind;
    char name[48];          /* "cpu (avx512, bf16 dot)", "cuda sm_90" */
    int sm;                 /* CUDA: compute capability x10 (75, 80, 86, 89, 90); CPU: 0 */
    bool native_bf16;       /* bf16 products at full speed (CPU: avx512_bf16; CUDA: sm_80+) */
    bool native_f16;        /* f16 products at full speed (CUDA: every sm_75+) */
    bool mma_bf16;          /* tensor-core mma.sync m16n8k16 with bf16 operands (sm_80+) */
    bool mma_f16;           /* mma.sync with f16 operands (m16n8k8 on sm_75, m16n8k16 on sm_80+) */
    bool tf32;              /* tf32 tensor-core GEMMs (sm_80+) */
    bool mma_fp8;           /* tensor cores multiply 8-bit floats (e4m3, e5m2) into f32 sums:
                               cuBLASLt's FP8 GEMMs (sm_89+: Ada, Hopper and newer); the fp8
                               pass rewrites products only where it is set. CPU: off */
    int warp_size;          /* 32 on CUDA, 1 on the CPU */
    int max_block_threads;  /* 1024 on CUDA */
    int64_t shared_default; /* shared memory a block gets without opting in (48 KiB) */
    int64_t shared_max;     /* the most a block can opt into (sm_75 64 KiB, sm_80 163 KiB,
                               sm_86/89 and sm_12x 99 KiB, sm_90 and sm_10x 227 KiB; a device's
                               own figure where there is one); 0 on the CPU */
    int sm_count;           /* multiprocessors (CUDA) or cores (CPU); 0: unknown */
    int64_t memory_bytes;   /* device memory; 0: unknown */
    bool att_dq_atomic;     /* CUDA: the attention backward's dq accumulated in f32 with atomic
                               adds by the dk/dv kernel (fuse.c; kernel.h), not by a dq kernel of
                               its own: not bit-deterministic (the order of the adds varies).
                               Off by default; sn_pipeline_kernels sets it for a CUDA target
                               when SN_ATT_TILES says "dq=atomic" (a tuning knob) */
    bool gelu_unfused;      /* the GELU and its gradient stay pointwise kernels, not the GEMM
                               epilogues GELU_BIAS, GELU_AUX_BIAS, DGELU (kernel.h). On for the
                               CPU (its vector pointwise kernels are faster than the GEMM's
                               element-wise epilogue), off for CUDA; also for comparing programs
                               to the bit where one computes a GELU in a pointwise kernel (a
                               recomputed one, IA3's scaled one), whose tanh is not the
                               epilogue's */
    bool accum_plain;       /* a GEMM adds a C (kernel.h accum) only beside no epilogue: the
                               sums with a bias, GELU or DGELU epilogue stay kernels of their
                               own. Off by default; sn_pipeline_kernels sets it for a CUDA
                               target when SN_GEMM_ACCUM=plain (the way around a cuBLASLt that
                               has no algorithm for C with those epilogues) */
    int64_t dgelu_min_elems; /* a GEMM takes the DGELU epilogue only for a product of at least
                               this many elements; a smaller one stores its product and the
                               GELU's gradient is a pointwise kernel. CUDA: 2^23 (on an H200,
                               2026-11-28, cuBLASLt's DGELU GEMM of gpt2 B=4 T=256, 1024 x 3072,
                               took 34 us where a plain GEMM of the size took 14 and the
                               pointwise kernel is about 5; at B=16 T=1024, 16384 x 3072, 173
                               against 110 + 75 apart); the CPU: 0 (gelu_unfused decides) */
    bool dgelu_accum_unfused; /* a GEMM with the DGELU epilogue adds no C: a sum of products
                               (LoRA's dh' A^T beside the base's dy W^T) is stored by the GEMM
                               that adds it, and the GELU's gradient is a pointwise kernel after
                               it. CUDA: on (cuBLASLt's DGELU with C ran 525 us where the bytes
                               and FLOPs model 99: gpt2 LoRA bf16 B=16 T=1024 on an H200,
                               2026-11-28, docs/gpu.md); SN_GEMM_ACCUM=dgelu fuses it again. CPU:
                               off (its GEMM epilogue adds C at no extra cost) */
    bool join_finish;       /* a norm weight gradient's FINISH kernel runs in the launch of a
                               later norm backward pair (kernel.h: tail; passes/join_finish.c).
                               CUDA: on (a launch less a FINISH); the CPU: off, each FINISH its
                               own kernel (the LLVM backend does not generate the joined form) */
    bool split_decode;      /* batch-1 decoding's few-row products and attention_cache run split in
                               two kernels where their items are too few to fill a GPU (kernel.h:
                               SN_DECODE_BLOCKS). CUDA: on; the CPU: off (its threads take the
                               items as they are; the LLVM backend has no split form) */
    bool att_dkv_parts;     /* grouped-query dk and dv in parts where sn_att_dkv_parts says so
                               (kernel.h: a PARTIAL kernel a query head, a FINISH adding the
                               heads). CUDA: on; off with SN_ATT_PARTS=0 (a GPU run's before and
                               after in one build). The CPU: off (its threads take the one
                               kernel's items as they come; the LLVM backend has no such form) */
    bool fuse_siblings;     /* products of one x by several trained weights are one product of
                               the weights concatenated (passes/siblings.c: LLaMA's q, k, v and
                               gate, up). CUDA: on (fewer, wider GEMMs); the CPU: off (at small
                               batches its copy of the weights a step cost more than the GEMMs it
                               joins save: smollm2-135m bf16 B=1 T=128, 2026-11-28, 245 against
                               230 ms a step) */
    bool row_cache;         /* CUDA row kernels keep a row's operands in registers between their
                               passes where they fit (codegen/cuda/cuda_row.h:
                               sn_cu_row_cache_begin): the row read once, its loads issued
                               together. CUDA: on; off with SN_ROW_CACHE=0 (a GPU run's before
                               and after in one build). The CPU: no such form (its rows stay in
                               cache between passes) */
    bool row_prefetch;      /* where a CUDA classifier keeps its row in registers, the block takes
                               rows in turn and copies the next into shared memory while it
                               works on this one (cuda_row.h: sn_cu_row_prefetch_plan; sm_80
                               and up). CUDA: on; off with SN_ROW_PREFETCH=0 (a GPU run's before
                               and after in one build) */
    bool thin_products;     /* a GEMM of many rows and few columns or a short contraction
                               (LoRA's x A, dy B^T, h B, dh A^T) is a generated kernel
                               (kernel.h: SN_KER_THIN), not a library call.
                               CUDA: on; off with SN_THIN=0 (a GPU run's before and after in one
                               build). The CPU: off (its GEMM reads x at the cache's speed) */
    bool thin_sums;         /* with thin_products: the weight gradients' products x^T W of many
                               rows into few rows or columns too (kernel.h: the sum form). CUDA:
                               on; off with SN_THIN=nosum (the thin products without them, for
                               a before and after in one build) or SN_THIN=0. The CPU: off */
    bool gemv_nf4_only;     /* the few-row product (kernel.h: SN_KER_GEMV) only for an NF4
                               weight (K, N), as before it read transposed and 16-bit weights:
                               off by default; sn_pipeline_kernels sets it when SN_GEMV=nf4 (a
                               before and after in one build) */
} sn_target;

/* sn_precision, how a program stores and multiplies its floats (sn_compile's precision; the
 * autocast pass): base/graph.h, since the session's options name it too. */

const char *sn_precision_name(sn_precision p); /* "fp32", "bf16", "fp16", "tf32" */
int sn_precision_parse(const char *s);         /* the precision named s, or -1 */
/* The precision a run takes when it names none (sinter train's --precision auto): on a GPU its
 * tensor cores' 16-bit type, bf16 from sm_80 and fp16 (with loss scaling) before, where the
 * products run several times faster than in fp32 (an H200: gpt2's bf16 step 35 ms, fp32 352
 * ms); fp32 on the CPU, even one with AVX-512 BF16 where bf16 trains about 1.6x faster
 * (docs/autocast.md): there a run's losses would then depend on the machine's features, and
 * the same command gives the same losses on every x86 machine. */
sn_precision sn_target_default_precision(const sn_target *t);

/* A CUDA target for compute capability sm (75 and up) with the published per-arch limits;
 * sm_count and memory_bytes unknown (a real device fills them in). */
sn_target sn_target_cuda(int sm);
/* Whether SN_ATT_TILES (the attention kernels' tuning knob, codegen/cuda/cuda_attention.c)
 * asks for the atomic dq: its entry "dq=atomic". */
bool sn_target_att_dq_atomic_asked(void);
/* Whether $SN_GEMM_ACCUM is "plain" (sn_target accum_plain). */
bool sn_target_accum_plain_asked(void);
/* Whether $SN_GEMM_ACCUM is "dgelu" (sn_target dgelu_accum_unfused off: DGELU beside C). */
bool sn_target_accum_dgelu_asked(void);
/* Whether SN_DECODE_SPLIT=0 asks for no decode split (split_decode off: a GPU run's before and
 * after of the split in one build); sn_pipeline_kernels reads it for a CUDA target. */
bool sn_target_decode_split_off(void);
/* Whether SN_ATT_PARTS=0 asks for grouped-query dk and dv in one kernel (att_dkv_parts off). */
bool sn_target_att_parts_off(void);
/* Whether SN_ROW_CACHE=0 asks for CUDA row kernels that read the row in every pass (row_cache
 * off); sn_target_cuda reads it. */
bool sn_target_row_cache_off(void);
/* Whether SN_ROW_PREFETCH=0 asks for a classifier a block a row (row_prefetch off). */
bool sn_target_row_prefetch_off(void);
/* Whether SN_THIN=0 asks for thin products as GEMMs (thin_products off); sn_target_cuda reads it. */
bool sn_target_thin_off(void);
/* Whether SN_THIN is nosum (or 0): the thin products without the sum form (thin_sums off). */
bool sn_target_thin_sums_off(void);
/* Whether SN_GEMV=nf4 asks for the few-row product of NF4 (K, N) weights alone (sn_target
 * gemv_nf4_only). */
bool sn_target_gemv_nf4_only_asked(void);
/* The CPU this process runs on (its bf16 dot-product support read from cpuid). */
sn_target sn_target_cpu(void);

#endif
