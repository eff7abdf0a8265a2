/* generate_cmd.c: `sinter generate CHECKPOINT` or `--hf DIR`: text from a checkpoint's model, or
 * a pretrained one's, with the KV cache (train/generate.h): the prompts through the model's
 * tokenizer, one prefill, then one decode step per token; the text streamed to stdout as it
 * comes (a batch of prompts: each printed when done), the speed to stderr. Convention: the
 * model, its LoRA adapters and its tokenizer are the checkpoint's (its metadata), or the
 * directory's (config.json, the weights, tokenizer.json); only the prompts and the sampling are
 * asked for. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "io/hf_llama.h"
#include "io/weights.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "program/kernel.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "cli.h"

enum { MAX_PROMPTS = 64 };

typedef struct {
    const char *prompt, *device, *bpe, *tokenizer_file, *hf, *tokenizer;
    long max_new, top_k, seed, context;
    double temperature, top_p;
    bool ignore_eot, no_cache;
    const char *base;
    /* not options: */
    const char *checkpoint;
    const char *prompts[MAX_PROMPTS];
    int n_prompts;
} gen_args;

#define O(field) offsetof(gen_args, field)

static const cli_opt gen_opts[] = {
    {"prompt", 'p', CLI_STR, "TEXT", O(prompt),
     .help = "the text to continue (default: a newline); given again, each\n"
             "prompt is a row of one batch, generated together"},
    {"max-new-tokens", 'n', CLI_INT, "N", O(max_new), 1, 1 << 20,
     .help = "new tokens per prompt (default 200); past the length the\n"
             "model was trained on, the window slides: the last half of it\n"
             "runs again and generation goes on after it"},
    {"temperature", 't', CLI_REAL, "X", O(temperature), 0, 100,
     .help = "sampling temperature (default 1.0; 0: greedy)"},
    {"top-k", 'k', CLI_INT, "K", O(top_k), 0, 1 << 24,
     .help = "sample among the K most likely tokens (default 40; 0: all)"},
    {"top-p", 0, CLI_REAL, "P", O(top_p), 0, 1, .lo_open = true, .hi_closed = true,
     .help = "then among the fewest likeliest tokens holding P of the\n"
             "probability (nucleus sampling; default 1: all of them)"},
    {"seed", 's', CLI_INT, "N", O(seed), 0, 0x7fffffff,
     .help = "sampling seed (default 1337); prompt b of a batch\n"
             "draws with N + b"},
    {"device", 0, CLI_CHOICE, "D", O(device), .choices = "auto, cuda, cpu, interp",
     .help = "auto (default): the CUDA GPU when there is one, else cpu;\n"
             "cuda: CUDA GPU 0 (CUDA_VISIBLE_DEVICES=N makes GPU N the first);\n"
             "cpu: compiled kernels on the CPU; interp: the reference interpreter"},
    {"no-cache", 0, CLI_FLAG, NULL, O(no_cache),
     .help = "compile every kernel, read and write no kernel cache (CUBINs for\n"
             "CUDA, object files for the CPU)"},
    {"bpe", 0, CLI_STR, "DIR", O(bpe),
     .help = "GPT-2 BPE from DIR/encoder.json and DIR/vocab.bpe (for a model\n"
             "trained with --tokenizer gpt2; default: the installed assets)"},
    {"tokenizer-file", 0, CLI_STR, "FILE", O(tokenizer_file),
     .help = "the Hugging Face tokenizer.json a model was trained with\n"
             "(sinter train --tokenizer-file; checked against its hash)"},
    {"hf", 0, CLI_STR, "DIR", O(hf),
     .help = "instead of a checkpoint: a pretrained GPT-2 or LLaMA-family model,\n"
             "a Hugging Face directory (config.json, model.safetensors or its\n"
             "index; tokenizer.json when there) or llm.c's .bin"},
    {"tokenizer", 0, CLI_CHOICE, "T", O(tokenizer), .choices = "gpt2, bytes",
     .help = "with --hf when DIR has no tokenizer.json (and no --tokenizer-file):\n"
             "GPT-2's BPE (--bpe) or bytes"},
    {"context", 0, CLI_INT, "N", O(context), 1, 1 << 20,
     .help = "with --hf: positions the cache holds before the window slides\n"
             "(default: the model's, at most 4096; GPT-2's at most its table)"},
    {"ignore-eot", 0, CLI_FLAG, NULL, O(ignore_eot),
     .help = "go on past <|endoftext|> (default: a prompt's text ends there)"},
    {"base", 0, CLI_CHOICE, "B", O(base), .choices = "nf4, f32, bf16",
     .help = "a QLoRA checkpoint's base on the device: nf4, as trained (up to 8\n"
             "prompts read its packed bytes, more unpack each weight every step),\n"
             "or f32 (dequantized once: about 7x the memory); default nf4, f32 on\n"
             "the CPU for more than 8 prompts. bf16, for any checkpoint: the\n"
             "linear layers' weights rounded to bf16 and read so (half their f32\n"
             "memory, faster decoding where memory bandwidth bounds it; the text\n"
             "can differ from f32's); the default for other checkpoints is f32"},
};

static int cmd_generate(int argc, char **argv);

const cli_command cli_generate_cmd = {
    .name = "generate",
    .synopsis = "CHECKPOINT [options] | --hf DIR [options]",
    .summary = "Generates text from a checkpoint's model or a pretrained one, with a KV cache.",
    .opts = CLI_OPTS(gen_opts),
    .notes = "The model, its LoRA adapters and its tokenizer are the checkpoint's (or --hf DIR's).\n"
             "The text goes to\n"
             "stdout as it is generated (the prompt first); tokens/s and the prefill's time to\n"
             "stderr. Exit status 2: a usage error; 1: a failure (the message says which).\n",
    .run = cmd_generate,
};

/* ---- the model from the checkpoint's metadata ---------------------------------------------- */

typedef struct {
    bool llama;          /* a LLaMA-family model (lc), else GPT-2 (c) */
    sn_gpt2_config c;
    sn_llama_config lc;
    int ctx, n_layer;    /* the model's, either family */
    bool has_lora;
    sn_gpt2_lora lora;
    bool nf4;            /* a QLoRA checkpoint: its base stays NF4 on the device, as trained */
    bool base16;         /* --base bf16: the linear weights stored in bf16 (the base16 pass) */
} gen_model;

static sn_status build_kv(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e) {
    gen_model *m = user;
    const sn_gpt2_lora *lo = m->has_lora ? &m->lora : NULL;
    sn_status s = m->llama ? sn_llama_build_kv_lora(g, &m->lc, B, T, decode, lo, e)
                           : sn_gpt2_build_kv(g, &m->c, B, T, decode, lo, e);
    /* --base bf16: every weight but the adapters frozen, so that the base16 pass stores the
       linear ones in bf16 (an NF4 base is frozen already) */
    if (!s && m->base16) sn_lora_freeze_base(g);
    return s;
}

/* A LLaMA-family checkpoint of a built-in shape (models/llama.h), or of a config.json's own
 * ("llama-custom", its "model.config"): its vocabulary is the rows of model.embed_tokens.weight
 * (padding included). */
static sn_status llama_of(const sn_ckpt_model *ck, const char *path, const char *name, gen_model *m,
                          sn_err *e) {
    char config[512];
    if (!strcmp(name, "llama-custom")) {
        sn_status s = sn_llama_config_parse(sn_ckpt_model_meta(ck, "model.config", config, sizeof config)
                                            ? config : NULL, &m->lc, e);
        if (s) {
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            return sn_fail(e, s, "checkpoint %s: %s", path, why);
        }
    } else if (!sn_llama_config_find(name, &m->lc)) {
        return sn_fail(e, SN_ERR_UNSUPPORTED, "checkpoint %s holds model '%s': sinter generate "
                       "knows the built-in LLaMA-family shapes (%s) and the llama-custom ones "
                       "sinter train writes", path, name, sn_llama_config_names());
    }
    int64_t emb[SN_MAX_RANK];
    if (sn_ckpt_model_shape(ck, "model.embed_tokens.weight", emb) != 2 || emb[0] < 1 || emb[0] > (1 << 24) ||
        emb[1] != m->lc.hidden)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds no parameter model.embed_tokens.weight "
                       "of (V, %d), which its model %s has: it is not a checkpoint of that model",
                       path, m->lc.hidden, name);
    m->lc.vocab = (int)emb[0];
    m->llama = true;
    m->ctx = m->lc.ctx;
    m->n_layer = m->lc.n_layer;
    return SN_OK;
}

/* The LoRA adapters the checkpoint's model shape names (", LoRA rank R alpha A on T"), or its
 * IA3 vectors (", IA3" at the end), if any. */
static sn_status lora_of(const sn_ckpt_model *ck, const char *path, gen_model *m, sn_err *e) {
    char shape[200], targets[16];
    bool meta = sn_ckpt_model_meta(ck, "model.shape", shape, sizeof shape);
    const char *lora = meta ? strstr(shape, ", LoRA rank ") : NULL;
    size_t len = meta ? strlen(shape) : 0;
    if (len > 5 && !strcmp(shape + len - 5, ", IA3")) {
        m->lora = (sn_gpt2_lora){.ia3 = true};
        m->has_lora = true;
        return SN_OK;
    }
    if (!lora) return SN_OK;
    double alpha;
    if (sscanf(lora, ", LoRA rank %d alpha %lg on %15s", &m->lora.lora.rank, &alpha, targets) != 3 ||
        !sn_gpt2_lora_targets_parse(targets, &m->lora.targets))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: its model shape '%s' names LoRA "
                       "adapters this sinter cannot read", path, shape);
    m->lora.lora.alpha = (float)alpha;
    m->has_lora = true;
    return SN_OK;
}

/* The GPT-2 configuration, vocabulary (the rows of wte, padding included) and adapters the
 * checkpoint holds. */
static sn_status model_of(const sn_ckpt_model *ck, const char *path, gen_model *m, sn_err *e) {
    char name[100];
    sn_status s;
    if (sn_ckpt_model_meta(ck, "model", name, sizeof name) &&
        (sn_llama_config_find(name, &m->lc) || !strcmp(name, "llama-custom")))
        return (s = llama_of(ck, path, name, m, e)) ? s : lora_of(ck, path, m, e);
    if (!sn_ckpt_model_meta(ck, "model", name, sizeof name) || !sn_gpt2_config_find(name, &m->c))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds %s%s%s, not one of sinter's GPT-2 "
                       "models (%s): generate from a checkpoint that `sinter train` wrote", path,
                       sn_ckpt_model_meta(ck, "model", name, sizeof name) ? "model '" : "no model name",
                       sn_ckpt_model_meta(ck, "model", name, sizeof name) ? name : "",
                       sn_ckpt_model_meta(ck, "model", name, sizeof name) ? "'" : "", sn_gpt2_config_names());
    int64_t wte[SN_MAX_RANK];
    if (sn_ckpt_model_shape(ck, "wte", wte) != 2 || wte[0] < 1 || wte[0] > (1 << 24) || wte[1] != m->c.n_embd)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds no parameter wte of (V, %d) with "
                       "1 <= V <= %d, which its model %s has: it is not a checkpoint of that model",
                       path, m->c.n_embd, 1 << 24, m->c.name);
    m->c.vocab = (int)wte[0];
    m->ctx = m->c.ctx;
    m->n_layer = m->c.n_layer;
    return lora_of(ck, path, m, e);
}

/* ---- running ---------------------------------------------------------------------------- */

typedef struct {
    const sn_tokenizer *tk;
    int n_new, B;
    bool stream;     /* batch 1: each token printed as it comes */
    bool stop_eot;
    bool done[MAX_PROMPTS];
    int n_done;
    long generated;  /* tokens drawn, stopped rows' left out */
} stream_state;

static bool on_step(void *user, int step, const int32_t *ids) {
    stream_state *st = user;
    (void)step;
    for (int b = 0; b < st->B; b++) {
        if (st->done[b]) continue;
        st->generated++;
        if (st->stop_eot && ids[b] == st->tk->eot) {
            st->done[b] = true;
            st->n_done++;
            continue;
        }
        if (st->stream) {
            size_t len;
            const char *bytes = sn_tokenizer_decode(st->tk, ids[b], &len);
            if (bytes) fwrite(bytes, 1, len, stdout);
            fflush(stdout);
        }
    }
    return st->n_done < st->B;
}

static sn_status open_device(const gen_args *a, sn_device **d, sn_err *e) {
    *d = NULL;
    sn_cuda_opts co = {.no_cache = a->no_cache};
    if (!strcmp(a->device, "interp")) return SN_OK;
    if (!strcmp(a->device, "cuda")) return sn_cuda_device_new_opts(0, &co, d, e);
    char why[512];
    if (!strcmp(a->device, "auto") && sn_cuda_device_count(why, sizeof why) > 0)
        return sn_cuda_device_new_opts(0, &co, d, e);
    if (!strcmp(a->device, "auto")) fprintf(stderr, "no CUDA device (%s): using cpu\n", why);
    return sn_cpu_device_new_opts(0, &(sn_cpu_opts){.no_cache = a->no_cache}, d, e);
}

/* Prints prompt b and its new tokens (to its stop) after a batch. */
static void print_row(const stream_state *st, const char *prompt, const int32_t *ids, int b) {
    printf("%s--- prompt %d ---\n%s", b ? "\n" : "", b + 1, prompt);
    for (int i = 0; i < st->n_new; i++) {
        if (st->stop_eot && ids[i] == st->tk->eot) break;
        size_t len;
        const char *bytes = sn_tokenizer_decode(st->tk, ids[i], &len);
        if (bytes) fwrite(bytes, 1, len, stdout);
    }
    printf("\n");
}

/* Where the model comes from: its shape, tokenizer, window and weights. */
typedef struct {
    gen_model m;
    sn_tokenizer *tk;
    int window;           /* positions a row uses before its window slides */
    sn_ckpt_model *ck;    /* a checkpoint's weights, or --hf's: */
    sn_weights w;
    bool has_w;
} gen_source;

static void source_free(gen_source *g) {
    if (g->tk) sn_tokenizer_free(g->tk);
    sn_ckpt_model_free(g->ck);
    if (g->has_w) sn_weights_free(&g->w);
}

static sn_status gpt2_bpe(const char *bpe, sn_tokenizer **tk, sn_err *e) {
    char enc[4200], merges[4200];
    snprintf(enc, sizeof enc, "%s/encoder.json", bpe);
    snprintf(merges, sizeof merges, "%s/vocab.bpe", bpe);
    return sn_tokenizer_gpt2_load(enc, merges, tk, e);
}

/* The checkpoint's model, its tokenizer (its metadata names it) and the length it was trained
 * on (the window). */
static sn_status from_checkpoint(const gen_args *a, const char *bpe, gen_source *g, sn_err *e) {
    gen_model *m = &g->m;
    char name[64] = "", seq_text[32];
    sn_status s = sn_ckpt_model_read(a->checkpoint, &g->ck, e);
    if (!s) s = model_of(g->ck, a->checkpoint, m, e);
    if (!s) sn_ckpt_model_meta(g->ck, "tokenizer", name, sizeof name);
    bool hf = !strncmp(name, "hf ", 3); /* "hf VOCAB HASH": a tokenizer.json (api/session.c) */
    if (!s && a->tokenizer_file && !hf) {
        s = sn_fail(e, SN_ERR_INVALID, "%s was trained with the %s tokenizer, not a tokenizer.json: "
                    "leave out --tokenizer-file", a->checkpoint, name[0] ? name : "bytes");
    } else if (!s && hf && !a->tokenizer_file) {
        s = sn_fail(e, SN_ERR_INVALID, "%s was trained with a Hugging Face tokenizer.json (vocabulary "
                    "and hash: %s): give that file with --tokenizer-file FILE", a->checkpoint, name + 3);
    } else if (!s && hf) {
        char here[64];
        if (!(s = sn_tokenizer_hf_load(a->tokenizer_file, &g->tk, e)) &&
            (snprintf(here, sizeof here, "hf %d %016" PRIx64, g->tk->vocab, g->tk->source_hash),
             strcmp(here, name)))
            s = sn_fail(e, SN_ERR_INVALID, "--tokenizer-file %s is not the tokenizer %s was trained "
                        "with (vocabulary and hash: %s there, %s here)", a->tokenizer_file,
                        a->checkpoint, name + 3, here + 3);
    } else if (!s && !strcmp(name, "gpt2")) {
        s = gpt2_bpe(bpe, &g->tk, e);
    } else if (!s && !(g->tk = sn_tokenizer_bytes_new())) {
        s = sn_fail_oom(e, 512, "the byte tokenizer");
    }
    if (s) return s;
    char qlora[80];
    m->nf4 = sn_ckpt_model_meta(g->ck, "qlora", qlora, sizeof qlora) != NULL; /* (run() decides) */
    int trained = sn_ckpt_model_meta(g->ck, "seq", seq_text, sizeof seq_text) ? atoi(seq_text) : m->ctx;
    g->window = trained < 1 || trained > m->ctx ? m->ctx : trained;
    if (m->llama) /* no position table: the cache holds the positions it was trained on, no more */
        m->ctx = m->lc.ctx = g->window;
    return SN_OK;
}

/* A pretrained model from a->hf (a Hugging Face directory, or llm.c's .bin for GPT-2), its
 * tokenizer (--tokenizer-file, DIR/tokenizer.json, or --tokenizer), and --context. */
static sn_status from_hf(const gen_args *a, const char *bpe, gen_source *g, sn_err *e) {
    gen_model *m = &g->m;
    sn_status s;
    int vocab;
    if (sn_hf_is_llama(a->hf)) {
        if ((s = sn_hf_llama_read(a->hf, &m->lc, &g->w, e))) return s;
        g->has_w = true;
        m->llama = true;
        m->lc.ctx = a->context ? (int)a->context : m->lc.ctx < 4096 ? m->lc.ctx : 4096; /* no table */
        m->ctx = g->window = m->lc.ctx, m->n_layer = m->lc.n_layer, vocab = m->lc.vocab;
    } else {
        if ((s = sn_weights_read(a->hf, &g->w, e))) return s;
        g->has_w = true;
        m->c = g->w.config;
        if (a->context > m->c.ctx)
            return sn_fail(e, SN_ERR_INVALID, "--context %ld: %s's position table has %d rows: give "
                           "at most that", a->context, a->hf, m->c.ctx);
        m->ctx = m->c.ctx, m->n_layer = m->c.n_layer, vocab = m->c.vocab;
        g->window = a->context ? (int)a->context : m->ctx;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", a->hf);
    FILE *f = a->tokenizer_file || a->tokenizer ? NULL : fopen(path, "rb");
    if (f) fclose(f);
    if (a->tokenizer_file || f) s = sn_tokenizer_hf_load(f ? path : a->tokenizer_file, &g->tk, e);
    else if (a->tokenizer && !strcmp(a->tokenizer, "gpt2")) s = gpt2_bpe(bpe, &g->tk, e);
    else if (a->tokenizer && !(g->tk = sn_tokenizer_bytes_new())) s = sn_fail_oom(e, 512, "the byte tokenizer");
    else if (!a->tokenizer)
        s = sn_fail(e, SN_ERR_INVALID, "%s has no tokenizer.json: give the model's tokenizer with "
                    "--tokenizer-file FILE, or --tokenizer gpt2 or bytes", a->hf);
    if (!s && g->tk->vocab > vocab)
        s = sn_fail(e, SN_ERR_INVALID, "the tokenizer has %d ids but %s's vocabulary only %d: give "
                    "the model's own tokenizer", g->tk->vocab, a->hf, vocab);
    return s;
}

static sn_status weights_get(void *src, const sn_node *p, float *dst, sn_err *e) {
    const gen_source *g = src;
    return sn_weights_fill(&g->w, p, 0, dst, e); /* the generation graphs have no padding */
}

static int by_value(const void *x, const void *y) {
    double u = *(const double *)x, v = *(const double *)y;
    return (u > v) - (u < v);
}

/* The median decode step's seconds (0: none, or no memory for the copy sorted). */
static double median_step(const sn_generate_stats *gs) {
    double *s = gs->n_steps ? malloc(sizeof *s * (size_t)gs->n_steps) : NULL;
    if (!s) return 0;
    memcpy(s, gs->step_s, sizeof *s * (size_t)gs->n_steps);
    qsort(s, (size_t)gs->n_steps, sizeof *s, by_value);
    int n = gs->n_steps;
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static sn_status run(const gen_args *a, const char *bpe, sn_err *e) {
    gen_source src = {0};
    sn_device *dev = NULL;
    sn_generator *gen = NULL;
    sn_tokens toks[MAX_PROMPTS] = {0};
    int32_t *out = NULL;
    sn_status s = a->hf ? from_hf(a, bpe, &src, e) : from_checkpoint(a, bpe, &src, e);
    gen_model *m = &src.m;
    sn_tokenizer *tk = src.tk;
    int B = a->n_prompts, lens[MAX_PROMPTS], window = src.window;
    const int32_t *ps[MAX_PROMPTS];
    for (int b = 0; !s && b < B; b++) {
        if (tk->bos >= 0) s = sn_tokens_push(&toks[b], tk->bos, e); /* the post-processor's <s> */
        if (!s) s = sn_tokenizer_encode(tk, a->prompts[b], strlen(a->prompts[b]), &toks[b], e);
        lens[b] = (int)toks[b].n;
        if (!s && lens[b] > window)
            s = a->hf ? sn_fail(e, SN_ERR_INVALID, "prompt %d is %d tokens, longer than the %d positions "
                                "of the cache: shorten it or give a longer --context", b + 1, lens[b], window)
                      : sn_fail(e, SN_ERR_INVALID, "prompt %d is %d tokens, longer than the sequences of %d "
                                "tokens the model was trained on: shorten it", b + 1, lens[b], window);
    }
    int32_t *ids[MAX_PROMPTS] = {0};
    for (int b = 0; !s && b < B; b++) {
        if (!(ids[b] = sn_malloc(sizeof(int32_t) * (toks[b].n + 1), "the prompt", e))) s = SN_ERR_OOM;
        for (size_t i = 0; !s && i < toks[b].n; i++) ids[b][i] = sn_tokens_get(&toks[b], i);
        ps[b] = ids[b];
    }
    m->base16 = a->base && !strcmp(a->base, "bf16");
    if (!s && a->base && !m->nf4 && !m->base16)
        s = sn_fail(e, SN_ERR_INVALID, "--base %s: %s has no NF4 base (a QLoRA checkpoint's, sinter "
                    "train --qlora): leave out --base, or give --base bf16 for its linear weights "
                    "in bf16", a->base, a->hf ? a->hf : a->checkpoint);
    if (!s) s = open_device(a, &dev, e);
    /* a QLoRA base: NF4 as trained (the least memory), its products of a batch of up to
       SN_GEMV_MAX_M reading the packed bytes (as fast as f32 on the CPU or faster:
       docs/finetune.md, "Generation"); f32 on the CPU for a larger batch, whose products would
       unpack every weight each step, and on the interpreter */
    bool cpu_f32 = !dev || (dev->target.kind != SN_TARGET_CUDA && B > SN_GEMV_MAX_M);
    if (!s && m->nf4 && (a->base ? strcmp(a->base, "nf4") : cpu_f32)) m->nf4 = false; /* f32, bf16 */
    /* past the trained positions the windows slide (generate.h) */
    sn_generator_opts go = {.build = build_kv, .user = m, .ctx = m->ctx, .n_layer = m->n_layer,
                            .batch = B, .window = window, .nf4 = m->nf4,
                            .base16 = m->base16 ? SN_BF16 : 0};
    if (!s) s = sn_generator_new(&go, dev, &gen, e);
    if (!s && src.ck) s = sn_ckpt_model_covers(src.ck, sn_generator_decode_graph(gen), e);
    if (!s) s = sn_generator_load(gen, src.ck ? sn_ckpt_model_weights(src.ck) : (sn_weight_source){weights_get, &src}, e);
    if (!s && !(out = sn_malloc(sizeof(int32_t) * (size_t)B * (size_t)a->max_new, "the new tokens", e)))
        s = SN_ERR_OOM;
    stream_state st = {.tk = tk, .n_new = (int)a->max_new, .B = B, .stream = B == 1,
                       .stop_eot = !a->ignore_eot && tk && tk->eot >= 0};
    sn_sample_opts so = {.n_new = (int)a->max_new, .temperature = (float)a->temperature,
                         .top_k = (int)a->top_k, .top_p = (float)a->top_p, .vocab = tk ? tk->vocab : 0,
                         .seed = (uint64_t)a->seed};
    if (!s && B == 1) {
        fputs(a->prompts[0], stdout);
        fflush(stdout);
    }
    if (!s) s = sn_generator_generate(gen, ps, lens, &so, out, on_step, &st, e);
    if (!s && B == 1) printf("\n");
    for (int b = 0; !s && b < B && B > 1; b++) print_row(&st, a->prompts[b], out + (size_t)b * (size_t)a->max_new, b);
    if (!s) {
        fflush(stdout);
        sn_generate_stats gs;
        sn_generator_stats(gen, &gs);
        int n_prompt = 0;
        for (int b = 0; b < B; b++) n_prompt += lens[b];
        double total = gs.prefill_s + gs.decode_s;
        /* a step that slid the window ran the prefill (and compiled it, the first time): its
           time is in the decode steps' tokens/s, which the median step leaves out */
        double med = median_step(&gs);
        fprintf(stderr, "generate: %ld tokens in %.2f s: %.2f tokens/s (batch %d on %s%s; prefill of "
                "%d prompt tokens %.3f s, then %.2f tokens/s; the median step %.2f ms",
                st.generated, total, total > 0 ? st.generated / total : 0, B,
                dev ? dev->name : "the reference interpreter", m->nf4 ? ", the base NF4"
                : m->base16 ? ", the linear weights bf16" : "",
                n_prompt, gs.prefill_s, gs.decode_s > 0 ? gs.n_steps * B / gs.decode_s : 0, 1e3 * med);
        if (gs.n_slides)
            fprintf(stderr, "; %d of the steps slid the window past the %d positions the model was "
                    "trained on, each a prefill of %d tokens", gs.n_slides, window, window / 2);
        fprintf(stderr, ")\n");
    }
    for (int b = 0; b < B; b++) {
        sn_tokens_free(&toks[b]);
        free(ids[b]);
    }
    free(out);
    sn_generator_free(gen);
    sn_device_free(dev);
    source_free(&src);
    return s;
}

/* Every --prompt (-p, --prompt=) of argv in order: the table's parse keeps the last only. */
static void collect_prompts(int argc, char **argv, gen_args *a) {
    for (int i = 1; i < argc && a->n_prompts < MAX_PROMPTS; i++) {
        if (!strcmp(argv[i], "--")) break;
        if ((!strcmp(argv[i], "--prompt") || !strcmp(argv[i], "-p")) && i + 1 < argc)
            a->prompts[a->n_prompts++] = argv[++i];
        else if (!strncmp(argv[i], "--prompt=", 9))
            a->prompts[a->n_prompts++] = argv[i] + 9;
    }
}

static int cmd_generate(int argc, char **argv) {
    const cli_command *cmd = &cli_generate_cmd;
    gen_args a = {.device = "auto", .max_new = 200, .top_k = 40, .top_p = 1.0, .seed = 1337, .temperature = 1.0};
    if (argc >= 2 && argv[1][0] != '-') { /* the checkpoint comes first */
        a.checkpoint = argv[1];
        argv[1] = argv[0];
        argc--, argv++;
    }
    int rc = cli_parse(cmd, argc, argv, &a);
    if (rc >= 0) return rc;
    if (!a.checkpoint && !a.hf)
        return cli_usage_error(cmd, "no checkpoint: give it first, `sinter generate CHECKPOINT [options]`, "
                               "or a pretrained model with --hf DIR");
    if (a.checkpoint && a.hf)
        return cli_usage_error(cmd, "a checkpoint and --hf %s: give one of them", a.hf);
    if (!a.hf && (a.tokenizer || a.context))
        return cli_usage_error(cmd, "--%s goes with --hf (a checkpoint knows its tokenizer and length)",
                               a.tokenizer ? "tokenizer" : "context");
    collect_prompts(argc, argv, &a);
    if (a.n_prompts <= 1) { /* none, or one spelled as a prefix of --prompt */
        a.prompts[0] = a.prompt ? a.prompt : "\n";
        a.n_prompts = 1;
    }
    for (int b = 0; b < a.n_prompts; b++)
        if (!*a.prompts[b])
            return cli_usage_error(cmd, "--prompt %d is empty: give some text (or leave --prompt out "
                                   "to start from a newline)", b + 1);
    char dir[4096];
    const char *bpe = NULL;
    if (a.bpe) bpe = a.bpe;
    else if (!cli_gpt2_bpe_dir(dir, NULL, 0)) bpe = "assets/gpt2"; /* read only for a gpt2 tokenizer */
    else bpe = dir;
    sn_err e;
    if (run(&a, bpe, &e)) {
        fflush(stdout);
        fprintf(stderr, "sinter generate: %s\n", e.msg);
        return 1;
    }
    return 0;
}
