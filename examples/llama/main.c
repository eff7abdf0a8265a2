/* main.c: trains the LLaMA-style model (llama.c) on a text corpus, byte-level, through sinter's
 * training session, then validates, saves a checkpoint and prints a sample.
 * Convention: every line of progress is "step N loss X", so scripts can read it. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static const char usage[] =
    "usage: llama [options]\n"
    "  --data PATH        text file or directory to train on (byte-level; default: fortunes)\n"
    "  --steps N          optimizer steps (default 300)\n"
    "  --batch B          sequences per step (default 16)\n"
    "  --seq T            tokens per sequence (default 128, the context)\n"
    "  --lr X             peak learning rate (default 3e-3)\n"
    "  --layers L         layers (default 4)\n"
    "  --device D         auto (default), cuda, cpu or interp\n"
    "  --every N          print the loss every N steps (default 10)\n"
    "  --checkpoint FILE  save the run at the end\n"
    "  --resume FILE      go on from a checkpoint of a run with the same options\n"
    "  --sample N         bytes to generate at the end (default 200; 0: none)\n";

static int fail(const char *msg) {
    fprintf(stderr, "llama: %s\n", msg);
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    llama_config c = llama_config_small();
    sn_session_opts o = sn_session_defaults();
    o.steps = 300;
    const char *checkpoint = NULL;
    int every = 10, n_sample = 200;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "llama: option '%s' needs a value\n%s", k, usage);
            return 2;
        }
        i++;
        if (!strcmp(k, "--data")) o.data = v;
        else if (!strcmp(k, "--steps")) o.steps = atoi(v);
        else if (!strcmp(k, "--batch")) o.batch = atoi(v);
        else if (!strcmp(k, "--seq")) o.seq = atoi(v);
        else if (!strcmp(k, "--lr")) o.lr = atof(v);
        else if (!strcmp(k, "--layers")) c.n_layer = atoi(v);
        else if (!strcmp(k, "--device")) {
            static const char *const devices[SN_DEVICE_COUNT] = {"auto", "cuda", "cpu", "interp"};
            int d = 0;
            while (d < SN_DEVICE_COUNT && strcmp(v, devices[d])) d++;
            if (d == SN_DEVICE_COUNT) {
                fprintf(stderr, "llama: --device %s: use auto, cuda, cpu or interp\n", v);
                return 2;
            }
            o.device = (sn_device_kind)d;
        }
        else if (!strcmp(k, "--every")) every = atoi(v);
        else if (!strcmp(k, "--checkpoint")) checkpoint = v;
        else if (!strcmp(k, "--resume")) o.resume = v;
        else if (!strcmp(k, "--sample")) n_sample = atoi(v);
        else {
            fprintf(stderr, "llama: unknown option '%s'\n%s", k, usage);
            return 2;
        }
    }
    if (every < 1) every = 1;
    if (strcmp(sn_version(), SINTER_VERSION))
        fprintf(stderr, "llama: built with sinter %s, running with %s\n", SINTER_VERSION, sn_version());

    char desc[128];
    llama_describe(&c, desc, sizeof desc);
    sn_model m = {.name = "llama", .desc = desc, .ctx = c.ctx, .build = llama_build, .user = &c};
    sn_session *s;
    sn_err e;
    if (sn_session_new(&m, &o, &s, &e)) return fail(e.msg);
    sn_session_info in;
    sn_session_info_get(s, &in);
    printf("llama (%s): %lld parameters, %zu training bytes, batch %d x %d, device %s, sinter %s\n",
           desc, (long long)in.params, in.train_tokens, in.batch, in.seq, in.device, sn_version());
    double t0 = now_s();
    sn_session_step_stats st;
    for (int i = in.step; i < o.steps; i++) {
        if (sn_session_step(s, &st, &e)) {
            sn_session_free(s);
            return fail(e.msg);
        }
        if (st.step % every == 0 || st.step == 1 || st.step == o.steps)
            printf("step %d loss %.4f (%.1f s)\n", st.step, st.loss, now_s() - t0);
    }
    double val;
    int rc = 0;
    if (sn_session_validate(s, &val, &e) || (checkpoint && sn_session_save(s, checkpoint, &e))) {
        rc = fail(e.msg);
    } else {
        printf("val loss %.4f after %d steps, %.1f s\n", val, o.steps, now_s() - t0);
        sn_session_sample_opts so = {.prompt = "\n", .n_new = n_sample, .temperature = 0.8f,
                                     .top_k = 40, .seed = 1};
        char *text;
        size_t len;
        if (n_sample > 0 && sn_session_sample(s, &so, &text, &len, &e)) rc = fail(e.msg);
        else if (n_sample > 0) {
            printf("---- sample ----\n%s\n----\n", text);
            free(text);
        }
    }
    sn_session_free(s);
    return rc;
}
