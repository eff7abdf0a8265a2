/* standin_check.h: what the stand-in driver's suites share (test_standin.c: training, offload,
 * LoRA; test_standin_gemm.c: cuBLASLt plans, epilogues and tuning; test_standin_cache.c: the
 * kernel cache and injected failures): the stand-in's libraries (tests/standin: libcuda over
 * host memory and the SIMT simulator, NVRTC wrapping the real one, cuBLASLt on the CPU), a CUDA
 * device on them, tiny models and their training steps.
 * Convention: the stand-in's settings are environment variables read at its first cuInit, so
 * each test (a forked process) sets its own before it opens the device. */
#ifndef SN_TEST_STANDIN_CHECK_H
#define SN_TEST_STANDIN_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/pipeline.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/device.h"
#include "train/train.h"
#include "harness.h"

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

enum { B = 2, T = 16, V = 64, STEPS = 20 };

/* The stand-in's three libraries (paths from meson: SN_TEST_STANDIN_*) for the next device. */
void use_standin(void);
/* Whether the real NVRTC the stand-in NVRTC wraps is here (a machine without the toolkit skips). */
bool have_nvrtc(void);
/* A kernel cache shared by the tests that do not test the cache, so the real NVRTC runs once
 * per program text. */
const char *shared_cache(void);
/* The stand-in's GPU 0 with kernel cache cache_dir (NULL: shared_cache()). */
sn_device *cuda(const char *cache_dir);

/* The stand-in's libcuda and cuBLASLt with a context current on device 0, a stream and a
 * cuBLASLt handle: what the tests that call cuBLASLt themselves start from (the GPU's
 * architecture: SN_STANDIN_SM, set before lt_open). */
typedef struct {
    sn_cuda_api a;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    cublasLtHandle_t lt;
} lt_setup;
void lt_open(lt_setup *L);
void lt_close(lt_setup *L);

/* tiny GPT-2 (vocabulary V, B x T) with its backward, with dropout p (tiny: none). */
sn_graph *tiny_dropout(float p);
sn_graph *tiny(void);
/* tiny GPT-2 through the autocast pass at precision p, with its backward; loss_only: as sinter
 * train compiles it (no logits kept). */
sn_graph *tiny_outputs(sn_precision p, bool loss_only);
sn_graph *tiny_at(sn_precision p);
/* A 2-layer LLaMA (examples/llama: rmsnorm, SwiGLU, grouped-query attention: 4 query heads on
 * 2 kv heads) of width dim with its backward, at precision p. */
sn_graph *llama_tiny_at(sn_precision p, int dim);
/* tiny GPT-2 with LoRA adapters (rank 4, every linear layer) in precision p, its frozen linear
 * weights in the compute dtype (base16: the base16 pass) or f32 parameters with weight shadows;
 * batch sequences; *stored the weights the base16 pass stored in 16 bits. */
sn_graph *tiny_lora_rows(sn_precision p, bool base16, int batch, int *stored);
sn_graph *tiny_lora_at(sn_precision p, bool base16, int *stored);

/* Batch `seed` of a rule the model can learn (B x T ids below V). */
void batch(int32_t *x, int32_t *y, uint64_t seed);
/* A trainer of g on d (STEPS steps, lr 1e-2), its optimizer offloaded or not. */
sn_trainer *trainer_offload(sn_graph *g, sn_device *d, bool offload, sn_err *e);
sn_trainer *trainer_on(sn_graph *g, sn_device *d, sn_err *e);
/* A trainer of g on gpu compiled with po: steps steps, lr 1e-2. */
sn_trainer *trainer_with(sn_graph *g, sn_device *gpu, const sn_pipeline_opts *po, int steps);
/* steps steps (every third with an evaluation, checked against the training program's loss on
 * its batch, which is then a second micro-batch); SN_OK or the failure */
sn_status train(sn_trainer *t, int steps, double *loss, double *norm, sn_err *e);
/* n steps of tr on batches 0, 1, ..: their losses and gradient norms. */
void run_steps(sn_trainer *tr, int n, double *loss, double *norm, const char *what);

#endif
