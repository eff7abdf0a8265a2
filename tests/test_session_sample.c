/* test_session_sample.c: a training session's samples over a KV cache (api/session.h: the
 * model's build_kv) against the same session's samples by the recomputing sampler: greedy
 * samples of GPT-2 and a LLaMA-family model, with LoRA adapters and on a vocabulary the
 * pad_vocab pass pads, are the same text; what the KV path cannot take (a prompt past the
 * training length, a memory plan) falls back; a generation graph that lacks a trained parameter is
 * refused by name. */
#include <stdlib.h>
#include <string.h>

#include "api/session.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "harness.h"

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

/* A model of either family, with LoRA or not, and how often its generation graphs were built
 * (the KV path's evidence). */
typedef struct {
    bool llama, lora, kv_without_lora, nf4;
    bool delay; /* the optimizer offloaded with the delayed parameter update */
    sn_gpt2_config g;
    sn_llama_config l;
    int kv_builds;
} model;

static sn_status build(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    model *m = user;
    sn_gpt2_lora lo = {.lora = {.rank = 2, .alpha = 4}, .targets = SN_GPT2_LORA_ALL};
    if (m->llama) {
        sn_llama_config c = m->l;
        c.vocab = V;
        sn_llama lm;
        return sn_llama_build_lora(g, &c, B, T, m->lora ? &lo : NULL, &lm, e);
    }
    sn_gpt2_config c = m->g;
    c.vocab = V;
    sn_gpt2 gm;
    return sn_gpt2_build_lora(g, &c, B, T, m->lora ? &lo : NULL, &gm, e);
}

static sn_status build_kv(sn_graph *g, int B, int T, int V, bool decode, void *user, sn_err *e) {
    model *m = user;
    m->kv_builds++;
    sn_gpt2_lora lo = {.lora = {.rank = 2, .alpha = 4}, .targets = SN_GPT2_LORA_ALL};
    const sn_gpt2_lora *l = m->lora && !m->kv_without_lora ? &lo : NULL;
    if (m->llama) {
        sn_llama_config c = m->l;
        c.vocab = V;
        return sn_llama_build_kv_lora(g, &c, B, T, decode, l, e);
    }
    sn_gpt2_config c = m->g;
    c.vocab = V;
    return sn_gpt2_build_kv(g, &c, B, T, decode, l, e);
}

/* A session of m trained `steps` steps on the CPU device; kv: with build_kv. The GPT-2
 * fixture's tokenizer.json (702 ids) makes the pad_vocab pass pad the table to 704 rows. */
static sn_session *session(model *m, bool kv, int steps, int64_t mem) {
    sn_session_opts o = sn_session_defaults();
    o.data = sn_test_asset("tinyshakespeare.txt");
    o.tokenizer_file = SN_TEST_FIXTURES "/tokenizers/gpt2/tokenizer.json";
    o.device = SN_DEVICE_CPU;
    o.batch = 2;
    o.steps = steps + 3; /* three more for same_samples' second round */
    o.lr = 1e-2;
    o.mem = mem;
    o.nf4 = m->nf4; /* QLoRA: the base NF4 in the trainer and in both samplers */
    if (m->delay) o.offload = SN_OFFLOAD_OPTIMIZER, o.offload_delay = true;
    int ctx = m->llama ? m->l.ctx : m->g.ctx, layers = m->llama ? m->l.n_layer : m->g.n_layer;
    sn_model sm = {.name = m->llama ? "llama-tiny" : "tiny", .ctx = ctx, .build = build, .user = m,
                   .build_kv = kv ? build_kv : NULL, .n_layer = kv ? layers : 0};
    sn_session *s;
    sn_err e;
    ck_assert_msg(sn_session_new(&sm, &o, &s, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < steps; i++) ck_assert_msg(sn_session_step(s, NULL, &e) == SN_OK, "%s", e.msg);
    return s;
}

/* A greedy sample of n tokens after "The" (malloc'd). */
static char *sample(sn_session *s, int n) {
    sn_session_sample_opts so = {.prompt = "The", .n_new = n, .temperature = 0, .seed = 7};
    char *text;
    size_t len;
    sn_err e;
    ck_assert_msg(sn_session_sample(s, &so, &text, &len, &e) == SN_OK, "%s", e.msg);
    ck_assert_uint_eq(strlen(text), len);
    return text;
}

/* m's greedy samples with and without build_kv, after the same steps, are the same text, and
 * again after three more steps; the KV path built its graphs (decode and prefill) once for both. */
static void same_samples(model *m) {
    sn_session *kv = session(m, true, 4, 0), *re = session(m, false, 4, 0);
    for (int round = 0; round < 2; round++) {
        sn_err e;
        for (int i = 0; round && i < 3; i++) /* new weights: the generator's must follow */
            ck_assert_msg(!sn_session_step(kv, NULL, &e) && !sn_session_step(re, NULL, &e), "%s", e.msg);
        char *a = sample(kv, 16), *b = sample(re, 16);
        ck_assert_msg(!strcmp(a, b), "the KV cache's sample '%s' is not the recomputing one's '%s'", a, b);
        ck_assert_msg(strlen(a) > 3, "sample '%s': no new tokens", a);
        free(a);
        free(b);
    }
    ck_assert_int_eq(m->kv_builds, 2); /* the decode graph and one prefill graph, kept */
    sn_session_free(kv);
    sn_session_free(re);
}

static model gpt2_tiny(bool lora) {
    model m = {.lora = lora};
    ck_assert(sn_gpt2_config_find("tiny", &m.g));
    return m;
}

static model llama_tiny(bool lora) {
    model m = {.llama = true, .lora = lora};
    ck_assert(sn_llama_config_find("llama-tiny", &m.l));
    return m;
}

START_TEST(gpt2_kv_equals_recomputed) {
    model m = gpt2_tiny(false);
    same_samples(&m);
}
END_TEST

START_TEST(gpt2_lora_kv_equals_recomputed) {
    model m = gpt2_tiny(true);
    same_samples(&m);
}
END_TEST

START_TEST(qlora_kv_equals_recomputed) {
    model m = gpt2_tiny(true);
    m.nf4 = true;
    same_samples(&m);
    m = llama_tiny(true);
    m.nf4 = true;
    same_samples(&m);
}
END_TEST

START_TEST(llama_kv_equals_recomputed) {
    model m = llama_tiny(false);
    same_samples(&m);
    m = llama_tiny(true);
    same_samples(&m);
}
END_TEST

/* A prompt longer than the training length, or a run under a memory plan, takes the
 * recomputing sampler; a sample past the training length slides the cache's window. */
START_TEST(falls_back) {
    model m = gpt2_tiny(false);
    sn_session *s = session(&m, true, 1, 0);
    char long_prompt[200];
    memset(long_prompt, 'a', sizeof long_prompt - 1);
    long_prompt[sizeof long_prompt - 1] = 0;
    sn_session_sample_opts so = {.prompt = long_prompt, .n_new = 4, .temperature = 0};
    char *t;
    size_t len;
    sn_err e;
    ck_assert_msg(sn_session_sample(s, &so, &t, &len, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(m.kv_builds, 0);
    free(t);
    t = sample(s, 3 * m.g.ctx); /* past the training length */
    ck_assert_int_eq(m.kv_builds, 3); /* decode, the prompt's prefill, the slid window's */
    ck_assert_uint_gt(strlen(t), (size_t)m.g.ctx);
    free(t);
    sn_session_free(s);
    m.kv_builds = 0;
    s = session(&m, true, 1, (int64_t)1 << 30);
    t = sample(s, 4);
    ck_assert_int_eq(m.kv_builds, 0);
    free(t);
    sn_session_free(s);
}
END_TEST

/* With the delayed parameter update the samplers read the weights through a drain: the KV
 * cache's and the recomputing sampler's texts are the same, after more steps too; the delay
 * without offload is refused. */
START_TEST(delayed_update_samples) {
    model m = gpt2_tiny(false);
    m.delay = true;
    same_samples(&m);
    sn_session_opts o = sn_session_defaults();
    o.offload_delay = true;
    sn_session *s;
    sn_err e;
    sn_model sm = {.name = "tiny", .ctx = m.g.ctx, .build = build, .user = &m};
    ck_assert_int_eq(sn_session_new(&sm, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "give offload SN_OFFLOAD_OPTIMIZER with it");
    o.offload_delay = false, o.offload = SN_OFFLOAD_OPTIMIZER, o.offload_threads = 3;
    ck_assert_int_eq(sn_session_new(&sm, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "offload_threads 3: the delayed update's host threads");
}
END_TEST

/* Generation graphs without the trained adapters would sample another model: refused. */
START_TEST(missing_parameter_refused) {
    model m = gpt2_tiny(true);
    m.kv_without_lora = true;
    sn_session *s = session(&m, true, 1, 0);
    sn_session_sample_opts so = {.prompt = "The", .n_new = 4};
    char *text = NULL;
    size_t len;
    sn_err e;
    ck_assert_int_eq(sn_session_sample(s, &so, &text, &len, &e), SN_ERR_INVALID);
    ck_assert_ptr_null(text);
    ck_assert_has(e.msg, "generation graph (build_kv) has no parameter h.0.attn.c_attn.lora_a");
    sn_session_free(s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("session_sample");
    TCase *tc = tcase_create("session_sample");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, gpt2_kv_equals_recomputed);
    tcase_add_test(tc, gpt2_lora_kv_equals_recomputed);
    tcase_add_test(tc, llama_kv_equals_recomputed);
    tcase_add_test(tc, qlora_kv_equals_recomputed);
    tcase_add_test(tc, falls_back);
    tcase_add_test(tc, missing_parameter_refused);
    tcase_add_test(tc, delayed_update_samples);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
