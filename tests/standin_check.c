/* standin_check.c: the stand-in suites' shared steps (standin_check.h): the stand-in's
 * libraries and device, tiny models, their trainers and steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "standin_check.h"
#include "models/gpt2.h"
#include "runtime/cuda/cuda_rt.h"
#include "examples/llama/llama.h"

/* The stand-in's three libraries (paths from meson) and a kernel cache shared by the tests that
 * do not test the cache, so the real NVRTC runs once per program text. */
void use_standin(void) {
    setenv("SN_LIBCUDA", SN_TEST_STANDIN_CUDA, 1);
    setenv("SN_LIBNVRTC", SN_TEST_STANDIN_NVRTC, 1);
    setenv("SN_LIBCUBLASLT", SN_TEST_STANDIN_CUBLASLT, 1);
}

/* Whether the real NVRTC the stand-in NVRTC wraps is here (a machine without the toolkit skips). */
bool have_nvrtc(void) {
    use_standin();
    sn_cuda_api a = {0};
    sn_err e;
    int major = 0, minor = 0;
    bool ok = sn_nvrtc_version(&a.nvrtc, &major, &minor, &e) == SN_OK;
    if (!ok) printf("test_standin: skipped: no NVRTC for the stand-in to wrap\n");
    sn_cuda_api_unload(&a);
    return ok;
}

const char *shared_cache(void) {
    static char dir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sinter_standin_cache_%ld", tmp && *tmp ? tmp : "/tmp", (long)getuid());
    return dir;
}

sn_device *cuda(const char *cache_dir) {
    use_standin();
    sn_cuda_opts o = {.cache_dir = cache_dir ? cache_dir : shared_cache()};
    sn_device *d = NULL;
    sn_err e;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

/* tiny GPT-2 (vocabulary 64) with its backward, with dropout p */
sn_graph *tiny_dropout(float p) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    c.dropout = p;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

sn_graph *tiny(void) { return tiny_dropout(0); }

void batch(int32_t *x, int32_t *y, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % V);
        y[i] = (x[i] * 3 + 1) % V; /* a rule the model can learn */
    }
}

sn_trainer *trainer_offload(sn_graph *g, sn_device *d, bool offload, sn_err *e) {
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.device = d;
    o.offload = offload;
    return sn_trainer_new(g, &o, e);
}

sn_trainer *trainer_on(sn_graph *g, sn_device *d, sn_err *e) {
    return trainer_offload(g, d, false, e);
}

/* steps steps (every third with an evaluation, checked against the training program's loss on
 * its batch, which is then a second micro-batch); SN_OK or the failure */
sn_status train(sn_trainer *t, int steps, double *loss, double *norm, sn_err *e) {
    int32_t x[B * T], y[B * T];
    sn_status st = SN_OK;
    for (int s = 0; s < steps && !st; s++) {
        batch(x, y, (uint64_t)s);
        st = sn_trainer_accumulate(t, x, y, NULL, e);
        if (!st && s % 3 == 2) {
            double l;
            batch(x, y, 1000 + (uint64_t)s);
            st = sn_trainer_eval(t, x, y, &l, e);
            /* the evaluation program's loss is the training program's: to the bit on the CPU
             * device (test_eval); here within 1e-6, because on CUDA the two compute a row's
             * log-sum-exp differently: training's classifier (cuda_row.c cross_entropy_bwd)
             * in one online pass over a block, the evaluation's cross_entropy
             * (cuda_row_sums.c) as a max then a warp-summed exp; an ulp apart on a rare row
             * (6e-8 at step 5 of the first run, every other step equal) */
            double la;
            if (!st) st = sn_trainer_accumulate(t, x, y, &la, e);
            ck_assert_msg(st || fabs(l - la) <= 1e-6 * fabs(la) || sn_trainer_dropout(t) > 0,
                          "step %d: eval %.9g, the training program %.9g", s, l, la); /* dropout: not equal */
        }
        sn_step_stats ss;
        if (!st) st = sn_trainer_update(t, &ss, e);
        if (!st) {
            loss[s] = ss.loss;
            norm[s] = ss.grad_norm;
        }
    }
    return st;
}

/* tiny GPT-2 through the autocast pass at precision p, with its backward */
sn_graph *tiny_outputs(sn_precision p, bool loss_only) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    if (loss_only) { /* as sinter train compiles it: no logits kept */
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, m.loss);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

sn_graph *tiny_at(sn_precision p) { return tiny_outputs(p, false); }

/* A 2-layer LLaMA (examples/llama: rmsnorm, SwiGLU, grouped-query attention: 4 query heads on
 * 2 kv heads) of width dim with its backward, at precision p. */
sn_graph *llama_tiny_at(sn_precision p, int dim) {
    llama_config c = {.ctx = T, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .dim = dim,
                      .hidden = dim * 3 / 2, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    sn_graph *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(llama_build(g, B, T, V, &c, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* A trainer of g on gpu compiled with po: steps steps, lr 1e-2. */
sn_trainer *trainer_with(sn_graph *g, sn_device *gpu, const sn_pipeline_opts *po, int steps) {
    sn_train_opts o;
    sn_train_opts_default(&o, steps);
    o.lr = 1e-2f;
    o.device = gpu;
    o.compile = po;
    sn_err e;
    sn_trainer *tr = sn_trainer_new(g, &o, &e);
    ck_assert_msg(tr, "%s", e.msg);
    return tr;
}

/* n steps of tr on batches 0, 1, ..: their losses and gradient norms. */
void run_steps(sn_trainer *tr, int n, double *loss, double *norm, const char *what) {
    int32_t x[B * T], y[B * T];
    for (int s = 0; s < n; s++) {
        sn_step_stats ss;
        sn_err e;
        batch(x, y, (uint64_t)s);
        ck_assert_msg(sn_trainer_step(tr, x, y, &ss, &e) == SN_OK, "%s step %d: %s", what, s, e.msg);
        loss[s] = ss.loss;
        norm[s] = ss.grad_norm;
    }
}

/* tiny GPT-2 with LoRA adapters (rank 4, every linear layer) in precision p, its frozen linear
 * weights in the compute dtype (the base16 pass) or f32 parameters with weight shadows */
sn_graph *tiny_lora_rows(sn_precision p, bool base16, int batch, int *stored) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = 4, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_gpt2_build_lora(g, &c, batch, T, &l, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    o.base16 = base16;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    *stored = st.base16_stored;
    return g;
}

sn_graph *tiny_lora_at(sn_precision p, bool base16, int *stored) {
    return tiny_lora_rows(p, base16, B, stored);
}

#define CK(call) ck_assert_msg((call) == SN_OK, "%s", e.msg)

void lt_open(lt_setup *L) {
    use_standin();
    *L = (lt_setup){0};
    sn_cuda_api *a = &L->a;
    sn_err e;
    CK(sn_cuda_api_load(a, SN_LIB_CUDA, &e));
    CK(sn_cuda_api_load(a, SN_LIB_CUBLASLT, &e));
    CK(SN_CUDA_CHECK(a, &e, cuInit, 0));
    CK(SN_CUDA_CHECK(a, &e, cuDeviceGet, &L->dev, 0));
    CK(SN_CUDA_CHECK(a, &e, cuDevicePrimaryCtxRetain, &L->ctx, L->dev));
    CK(SN_CUDA_CHECK(a, &e, cuCtxSetCurrent, L->ctx));
    CK(SN_CUDA_CHECK(a, &e, cuStreamCreate, &L->stream, CU_STREAM_NON_BLOCKING));
    CK(SN_CUDA_CHECK(a, &e, cublasLtCreate, &L->lt));
}

void lt_close(lt_setup *L) {
    L->a.cublasLtDestroy(L->lt);
    L->a.cuStreamDestroy(L->stream);
    L->a.cuDevicePrimaryCtxRelease(L->dev);
    sn_cuda_api_unload(&L->a);
}
