/* peft_check.c: what tests/test_hf.c checks of a PEFT adapter export (io/peft.c): written from a
 * LoRA checkpoint into dir, then read back as PEFT reads it: W + (lora_B lora_A)^T alpha/r of
 * each adapted layer, from the checkpoint's base W, equals the merged export's W to rounding;
 * the config holds r and lora_alpha and names each module; a second export into dir is
 * refused (nothing replaced); a checkpoint without adapters is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "io/weights.h"
#include "train/checkpoint.h"
#include "harness.h"
#include "peft_check.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "no %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(1, (size_t)n + 1);
    ck_assert(fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    return b;
}

void peft_check(const char *ckpt, const sn_weights *merged, const char *dir, int rank, float alpha,
                int layers) {
    sn_err e = {0};
    int n = 0;
    ck_assert_msg(sn_lora_write_peft(ckpt, dir, NULL, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, layers);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *config = slurp(path), want[64];
    snprintf(want, sizeof want, "\"r\": %d", rank);
    ck_assert_msg(strstr(config, want) && strstr(config, "\"peft_type\": \"LORA\"") &&
                  strstr(config, "\"fan_in_fan_out\": true") &&
                  strstr(config, "\"transformer.h.0.attn.c_attn\""), "config:\n%s", config);
    free(config);
    sn_ckpt_weights cw;
    ck_assert_msg(sn_checkpoint_read_weights(ckpt, &cw, &e) == SN_OK, "%s", e.msg);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    sn_st_file f;
    ck_assert_msg(sn_st_open(path, &f, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(f.n, 2 * layers);
    double worst = 0;
    for (int i = 0; i < f.n; i++) {
        const char *an = f.t[i].name, *at = strstr(an, ".lora_A.weight");
        if (!at) continue;
        const char *pre = "base_model.model.transformer.";
        ck_assert_msg(!strncmp(an, pre, strlen(pre)), "tensor %s", an);
        char prefix[160], bn[240], wn[180];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(at - an - strlen(pre)), an + strlen(pre));
        snprintf(bn, sizeof bn, "%s%s.lora_B.weight", pre, prefix);
        snprintf(wn, sizeof wn, "%s.w", prefix);
        const sn_st_tensor *ta = &f.t[i], *tb = sn_st_find(&f, bn);
        ck_assert_msg(tb, "no %s", bn);
        int64_t r = ta->shape[0], in = ta->shape[1], out = tb->shape[0];
        ck_assert_int_eq(r, rank);
        ck_assert_int_eq(tb->shape[1], r);
        float *A = malloc(sizeof(float) * (size_t)(r * in)), *B = malloc(sizeof(float) * (size_t)(out * r));
        ck_assert(sn_st_read_f32(&f, ta, A, &e) == SN_OK && sn_st_read_f32(&f, tb, B, &e) == SN_OK);
        const sn_ckpt_param *w = NULL;
        for (int k = 0; k < cw.n; k++)
            if (!strcmp(cw.params[k].name, wn)) w = &cw.params[k];
        const sn_weight *m = sn_weights_find(merged, wn);
        ck_assert_msg(w && m && w->shape[0] == in && w->shape[1] == out, "no base or merged %s", wn);
        for (int64_t p = 0; p < in; p++) /* W (in, out) + (B A)^T alpha / r */
            for (int64_t q = 0; q < out; q++) {
                double s = 0;
                for (int64_t k = 0; k < r; k++) s += (double)B[q * r + k] * A[k * in + p];
                double got = w->w[p * out + q] + s * alpha / (double)r;
                worst = fmax(worst, fabs(got - m->data[p * out + q]));
            }
        free(A);
        free(B);
    }
    ck_assert_msg(worst < 1e-6, "PEFT's merge differs from the merged export by %g", worst);
    printf("test_hf: PEFT adapter of %d layers: its merge equals the merged export to %.2g\n",
           layers, worst);
    sn_st_close(&f);
    sn_ckpt_weights_free(&cw);
    ck_assert(sn_lora_write_peft(ckpt, dir, NULL, &n, &e) == SN_ERR_IO); /* nothing replaced */
    ck_assert_msg(strstr(e.msg, "is not replaced"), "%s", e.msg);
}
