/* session.c: a training run of a language model (session.h): data, device, trainer, validation,
 * checkpoints and samples behind one opaque object, used by `sinter train` and by models written
 * outside the tree. Convention: what a checkpoint must agree with is written into the run's
 * metadata once, at sn_session_new, before a resume compares it with the file's. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "frontend/frontend.h"
#include "io/hf_llama.h"
#include "ir/nf4.h"
#include "io/weights.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "program/target.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"
#include "support/hash.h"
#include "support/plot.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "train/plan.h"
#include "train/sample.h"
#include "train/train.h"
#include "session.h"

struct sn_session {
    sn_model m;
    sn_session_opts o;
    sn_pipeline_opts po;     /* the trainer's compile options (forward rewrites, dump) */
    int B, T, micro;         /* micro-batches of (B, T) per optimizer step */
    sn_text text;
    sn_tokenizer *tk;
    sn_tokens toks, bin_val; /* what owns the ids: the encoded text, or the two splits' shards */
    sn_tokens train, val;
    int train_shards, val_shards; /* shards read into toks and bin_val; 0: a text */
    sn_val_iter vi;
    sn_graph *g, *sg;        /* training graph; sampling graph (1, T), built at the first sample */
    sn_device *dev;          /* NULL: the reference interpreter */
    sn_trainer *t;
    sn_sampler *sampler;
    sn_generator *gen;       /* samples over a KV cache (the model's build_kv), made at the first */
    sn_run_state run;        /* metadata, data RNG, loss curves: what a checkpoint carries */
    int32_t *x, *y;          /* (B, T) */
    bool planned;            /* o.mem: the run follows plan */
    int64_t budget, mem_free; /* o.mem: the plan's bytes; with SN_SESSION_MEM_AUTO, the device's
                                 free bytes it came from */
    int init_fresh;          /* o.init: adapters the file lacked */
    int fp8_products;        /* o.fp8: the products the fp8 pass made 8-bit */
    sn_plan plan;
    const int *stop;         /* sn_session_set_stop's flag, read atomically; NULL: none */
};

/* session.h's checkpoint policies as passes.h's (-1: none, or the plan's choice). */
static int recompute_policy(sn_checkpoint_policy p) {
    switch (p) {
    case SN_CHECKPOINT_AUTO: return -1;
    case SN_CHECKPOINT_NONE: return SN_RECOMPUTE_NONE;
    case SN_CHECKPOINT_BLOCK: return SN_RECOMPUTE_BLOCK;
    case SN_CHECKPOINT_SQRT: return SN_RECOMPUTE_SQRT;
    case SN_CHECKPOINT_COUNT: break;
    }
    SN_ASSERT(0);
}

sn_session_opts sn_session_defaults(void) {
    return (sn_session_opts){.device = SN_DEVICE_AUTO, .data = SN_DEFAULT_CORPUS, .batch = 16, .steps = 600,
                             .lr = 3e-3, .seed = 1337, .val_batches = 8, .precision = SN_PRECISION_FP32,
                             .checkpoint_policy = SN_CHECKPOINT_AUTO, .offload = SN_OFFLOAD_AUTO, .warmup = -1,
                             .chunk_logits = -1,
                             .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .grad_clip = 1.0,
                             .min_lr_frac = 0.1};
}

void sn_session_free(sn_session *s) {
    if (!s) return;
    free(s->x);
    free(s->y);
    sn_run_state_free(&s->run);
    sn_sampler_free(s->sampler);
    sn_generator_free(s->gen);
    sn_trainer_free(s->t);
    sn_device_free(s->dev);
    sn_graph_free(s->sg);
    sn_graph_free(s->g);
    sn_tokens_free(&s->toks);
    sn_tokens_free(&s->bin_val);
    if (s->tk) sn_tokenizer_free(s->tk);
    sn_text_free(&s->text);
    free(s);
}

/* The device o->device names: cuda (an error without a GPU), cpu, auto (cuda when the driver
 * reports a device, else cpu, saying why in one line); NULL for interp. */
static sn_status open_device(const sn_session_opts *o, sn_device **dev, sn_err *e) {
    *dev = NULL;
    sn_cuda_opts co = {.tf32 = o->tf32 || o->precision == SN_PRECISION_TF32, .no_cache = o->no_cache};
    switch (o->device) {
    case SN_DEVICE_CUDA: return sn_cuda_device_new_opts(0, &co, dev, e);
    case SN_DEVICE_AUTO: {
        char why[512];
        if (sn_cuda_device_count(why, sizeof why) > 0) return sn_cuda_device_new_opts(0, &co, dev, e);
        printf("no CUDA device (%s): using cpu\n", why);
        fflush(stdout);
        break;
    }
    case SN_DEVICE_INTERP: return SN_OK;
    case SN_DEVICE_CPU: break;
    case SN_DEVICE_COUNT: SN_ASSERT(0); /* check_opts refused it */
    }
    return sn_cpu_device_new_opts(0, &(sn_cpu_opts){.no_cache = o->no_cache}, dev, e);
}

/* The tokenizer and the train / validation streams: a text split 90/10, or two shards. */
static sn_status load_data(const sn_session_opts *o, sn_session *r, sn_err *e) {
    sn_status s;
    if (!o->train_bin != !o->val_bin)
        return sn_fail(e, SN_ERR_INVALID, "token shards come in pairs: give both --train-bin and --val-bin");
    if (o->bpe && o->tokenizer_file)
        return sn_fail(e, SN_ERR_INVALID, "two tokenizers: GPT-2's files (--bpe) and %s: give one",
                       o->tokenizer_file);
    if (o->tokenizer_file) {
        if ((s = sn_tokenizer_hf_load(o->tokenizer_file, &r->tk, e))) return s;
    } else if (o->bpe) {
        char enc[4096], merges[4096];
        snprintf(enc, sizeof enc, "%s/encoder.json", o->bpe);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", o->bpe);
        if ((s = sn_tokenizer_gpt2_load(enc, merges, &r->tk, e))) return s;
    } else {
        if (!(r->tk = sn_tokenizer_bytes_new())) return sn_fail_oom(e, 512, "the byte tokenizer");
    }
    if (o->train_bin) {
        if ((s = sn_shards_read(o->train_bin, r->tk->vocab, &r->toks, &r->train_shards, e)) ||
            (s = sn_shards_read(o->val_bin, r->tk->vocab, &r->bin_val, &r->val_shards, e))) {
            if (!o->bpe && !o->tokenizer_file && s == SN_ERR_PARSE && strstr(e->msg, "vocab"))
                snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                         " (shards of GPT-2 tokens need the GPT-2 tokenizer: --tokenizer gpt2)");
            return s;
        }
        r->train = r->toks;
        r->train.cap = 0; /* views: toks and bin_val own the ids */
        r->val = r->bin_val;
        r->val.cap = 0;
        return SN_OK;
    }
    if ((s = sn_text_load(o->data ? o->data : SN_DEFAULT_CORPUS, &r->text, e))) return s;
    if ((s = sn_tokenizer_encode(r->tk, r->text.bytes, r->text.len, &r->toks, e))) return s;
    return sn_tokens_split(&r->toks, 0.1, &r->train, &r->val, e);
}

/* A stream's identity: its length and the hash of its ids (the shards' concatenation), with the
 * count of shards when there are several (one shard reads as a text of the same ids did). */
static void data_meta(sn_run_state *m, const char *key, const sn_tokens *t, int shards) {
    uint64_t h = SN_HASH_INIT;
    for (size_t i = 0; i < t->n; i++) h = sn_hash_word(h, (uint64_t)sn_tokens_get(t, i));
    if (shards > 1) sn_run_meta_set(m, key, "%d shards, %zu tokens, hash %016" PRIx64, shards, t->n, h);
    else sn_run_meta_set(m, key, "%zu tokens, hash %016" PRIx64, t->n, h);
}

/* What a checkpoint of this run must agree with to be resumed (the trainer adds its options). */
static void set_meta(sn_session *r) {
    sn_run_state *m = &r->run;
    sn_run_meta_set(m, "model", "%s", r->m.name);
    if (r->m.desc) sn_run_meta_set(m, "model.shape", "%s", r->m.desc);
    if (r->m.config) sn_run_meta_set(m, "model.config", "%s", r->m.config);
    if (r->o.data_in_order) sn_run_meta_set(m, "data.order", "in order"); /* random: no key */
    if (r->tk->source_hash) /* a tokenizer.json: its vocabulary and the file's hash */
        sn_run_meta_set(m, "tokenizer", "%s %d %016" PRIx64, r->tk->name, r->tk->vocab,
                        r->tk->source_hash);
    else
        sn_run_meta_set(m, "tokenizer", "%s", r->tk->name);
    sn_run_meta_set(m, "precision", "%s", sn_precision_name(r->po.precision));
    if (r->po.fp8) /* another run's losses: resumed only with the same products */
        sn_run_meta_set(m, "fp8", "%s products on e4m3/e5m2 operands, power-of-two scales",
                        sn_fp8_policy_name((sn_fp8_policy)r->po.fp8));
    if (r->po.nf4) /* the adapters' rank is in model.shape */
        sn_run_meta_set(m, "qlora", "NF4 base, blocks of %d, 8-bit absmax in groups of %d",
                        SN_NF4_BLOCK, SN_NF4_SCALE_GROUP);
    sn_run_meta_set(m, "batch", "%d", r->B);
    sn_run_meta_set(m, "seq", "%d", r->T);
    sn_run_meta_set(m, "tokens_per_step", "%ld", (long)r->micro * r->B * r->T);
    data_meta(m, "train_data", &r->train, r->train_shards);
    data_meta(m, "val_data", &r->val, r->val_shards);
}

/* Calls the model's build for (B, T) into a new graph and checks what the session relies on.
 * A training graph keeps only the loss as output (the logits need not outlive the step). */
static sn_status build_graph(sn_session *r, int B, int T, bool training, sn_graph **out, sn_err *e) {
    if (!(*out = sn_graph_new())) return sn_fail_oom(e, sizeof(sn_graph), "the model's graph");
    sn_graph *g = *out;
    sn_status s = r->m.build(g, B, T, r->tk->vocab, r->m.user, e);
    if (s) return s;
    if (sn_graph_error(g))
        return sn_fail(e, g->err.code, "model %s: %s", r->m.name, sn_graph_error(g));
    if (!g->loss)
        return sn_fail(e, SN_ERR_INVALID, "model %s: its build set no loss: call sn_graph_set_loss "
                       "with the mean cross-entropy of the logits and the targets", r->m.name);
    const char *need = !sn_graph_input(g, SN_ROLE_TOKENS)  ? "tokens (sn_input_tokens)"
                       : !sn_graph_input(g, SN_ROLE_TARGETS) ? "targets (sn_input_targets)" : NULL;
    if (need)
        return sn_fail(e, SN_ERR_INVALID, "model %s: its build made no input of the role %s",
                       r->m.name, need);
    if (training) {
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, g->loss);
    }
    return SN_OK;
}

/* The planner's model: the training graph for a micro-batch of B sequences. */
static sn_status plan_graph(void *ctx, int B, sn_graph **out, sn_err *e) {
    sn_session *r = ctx;
    return build_graph(r, B, r->T, true, out, e);
}

static sn_status check_opts(const sn_model *m, const sn_session_opts *o, sn_err *e) {
    if (!m->build || !m->name)
        return sn_fail(e, SN_ERR_INVALID, "session: the model needs a name and a build function");
    if (m->ctx < 1 && o->seq < 1)
        return sn_fail(e, SN_ERR_INVALID, "model %s: ctx %d: give the model's longest sequence "
                       "(sn_model.ctx) or a seq", m->name, m->ctx);
    if ((unsigned)o->device >= SN_DEVICE_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "session: device %d: give SN_DEVICE_AUTO, SN_DEVICE_CUDA, "
                       "SN_DEVICE_CPU or SN_DEVICE_INTERP", (int)o->device);
    if ((unsigned)o->checkpoint_policy >= SN_CHECKPOINT_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "session: checkpoint_policy %d: give SN_CHECKPOINT_AUTO "
                       "(none, or the plan's), _NONE, _BLOCK or _SQRT", (int)o->checkpoint_policy);
    if ((o->mem < 0 && o->mem != SN_SESSION_MEM_AUTO) || (o->mem && o->tokens_per_step))
        return sn_fail(e, SN_ERR_INVALID, "session: with mem the plan chooses the micro-batches: "
                       "give the sequences per step as batch and tokens_per_step 0, and mem as "
                       "bytes or SN_SESSION_MEM_AUTO");
    if (o->chunk_logits < -1)
        return sn_fail(e, SN_ERR_INVALID, "session: chunk_logits %lld: give rows a chunk, 0 (the "
                       "logits whole) or -1 (the plan's choice)", (long long)o->chunk_logits);
    if (o->fp8 < SN_FP8_OFF || o->fp8 > SN_FP8_LINEAR)
        return sn_fail(e, SN_ERR_INVALID, "session: fp8 %d: give 0 (off), 1 (the LM head's "
                       "products) or 2 (every linear layer's)", o->fp8);
    if (o->init && o->init_pretrained)
        return sn_fail(e, SN_ERR_INVALID, "session: a run starts from a checkpoint (init) or from "
                       "pretrained weights (init_pretrained), not both");
    if ((unsigned)o->offload >= SN_OFFLOAD_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "session: offload %d: give SN_OFFLOAD_AUTO (none, or the "
                       "plan's), SN_OFFLOAD_NONE or SN_OFFLOAD_OPTIMIZER (the optimizer state in "
                       "host memory)", (int)o->offload);
    if (o->offload == SN_OFFLOAD_OPTIMIZER && o->device == SN_DEVICE_INTERP)
        return sn_fail(e, SN_ERR_INVALID, "session: offload moves the optimizer state off a device "
                       "and the interpreter has none: use device cpu or cuda");
    if (o->offload_delay && o->offload != SN_OFFLOAD_OPTIMIZER)
        return sn_fail(e, SN_ERR_INVALID, "session: offload_delay overlaps the host's AdamW with the "
                       "device's next step: give offload SN_OFFLOAD_OPTIMIZER with it");
    if (o->offload_threads < 0 || (o->offload_threads && !o->offload_delay))
        return sn_fail(e, SN_ERR_INVALID, "session: offload_threads %d: the delayed update's host "
                       "threads are a count (0: the cores less one) and need offload_delay",
                       o->offload_threads);
    if (o->mem && o->device == SN_DEVICE_INTERP)
        return sn_fail(e, SN_ERR_INVALID, "session: mem plans device memory and the interpreter "
                       "has none: use device cpu or cuda");
    if (o->warmup < -1 || o->warmup > o->steps || !(o->weight_decay >= 0) || !(o->beta1 >= 0) ||
        !(o->beta1 < 1) || !(o->beta2 >= 0) || !(o->beta2 < 1) || !(o->grad_clip >= 0) ||
        !(o->min_lr_frac >= 0) || !(o->min_lr_frac <= 1))
        return sn_fail(e, SN_ERR_INVALID, "session: warmup %d (-1 .. steps %d), weight_decay %g "
                       "(>= 0), betas %g, %g (each in [0, 1)), grad_clip %g (>= 0, 0: none), "
                       "min_lr_frac %g (in [0, 1]): one is out of its range", o->warmup, o->steps,
                       o->weight_decay, o->beta1, o->beta2, o->grad_clip, o->min_lr_frac);
    if (o->batch < 1 || o->steps < 1 || o->seq < 0 || o->tokens_per_step < 0 || !(o->lr > 0))
        return sn_fail(e, SN_ERR_INVALID, "session: batch %d, seq %d, steps %d, lr %g: batch, "
                       "steps and lr must be positive, seq 0 (the model's) or more", o->batch,
                       o->seq, o->steps, o->lr);
    if ((unsigned)o->precision >= SN_PRECISION_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "session: precision %d: give SN_PRECISION_FP32, _BF16, "
                       "_FP16 or _TF32", (int)o->precision);
    return SN_OK;
}

/* A new run from pretrained weights (io/weights.h), set by name into the trainer. */
static sn_status init_pretrained(sn_session *r, const char *path, sn_err *e) {
    sn_weights w;
    sn_llama_config lc;
    bool llama = sn_hf_is_llama(path); /* else GPT-2 (Hugging Face or llm.c) */
    sn_status s = llama ? sn_hf_llama_read(path, &lc, &w, e) : sn_weights_read(path, &w, e);
    if (s) return s;
    int vocab = llama ? lc.vocab : w.config.vocab;
    if (vocab != r->tk->vocab)
        s = sn_fail(e, SN_ERR_INVALID, "%s: a vocabulary of %d ids, the %s tokenizer has %d: give "
                    "the tokenizer the model was trained with (--bpe DIR for GPT-2's)", path,
                    vocab, r->tk->name, r->tk->vocab);
    else s = sn_weights_init_trainer(&w, r->t, r->tk->vocab, &r->init_fresh, e);
    sn_weights_free(&w);
    return s;
}

int64_t sn_session_mem_auto(int64_t free_bytes, bool cuda) {
    int64_t floor = cuda ? (int64_t)256 << 20 : (int64_t)1 << 30;
    int64_t part = free_bytes / (cuda ? 20 : 10);
    int64_t left = free_bytes - (part > floor ? part : floor);
    return left > 0 ? left : 0;
}

/* With mem and resume: the micro-batch the checkpoint was saved with (its "batch"), which the
 * plan must keep for the run to go on exactly (its data and sums); 0 when the file says none
 * (the load reports an unreadable file). */
static int resumed_micro_batch(const char *path) {
    char buf[32], *end = NULL;
    const char *v = sn_checkpoint_peek_meta(path, "batch", buf, sizeof buf);
    long b = v ? strtol(v, &end, 10) : 0;
    return v && !*end && b > 0 && b <= INT32_MAX ? (int)b : 0;
}

/* SN_SESSION_MEM_AUTO: the budget from the open device's free memory. */
static sn_status mem_auto(sn_session *r, sn_err *e) {
    if (!r->dev->mem_info)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s cannot say how much memory it has free: give "
                       "mem (--mem) as bytes", r->dev->name);
    int64_t total = 0;
    sn_status s = r->dev->mem_info(r->dev, &r->mem_free, &total, e);
    if (s) return s;
    bool cuda = r->dev->target.kind == SN_TARGET_CUDA;
    r->budget = sn_session_mem_auto(r->mem_free, cuda);
    if (r->budget <= 0) {
        char f[32], t[32];
        return sn_fail(e, SN_ERR_OOM, "%s has %s free of %s, less than the %s a run keeps in reserve "
                       "with mem auto: free the device's memory (other processes) or give --mem as "
                       "bytes", r->dev->name, sn_bytes_str(r->mem_free, f, sizeof f),
                       sn_bytes_str(total, t, sizeof t), cuda ? "256 MiB" : "1 GiB");
    }
    return SN_OK;
}

/* precision_auto: the device's precision (a resumed run: its checkpoint's, so that it goes on
 * as it was saved wherever it resumes). */
static sn_status auto_precision(sn_session *r, sn_err *e) {
    sn_precision p = r->dev ? sn_target_default_precision(&r->dev->target) : SN_PRECISION_FP32;
    char buf[16];
    const char *saved = r->o.resume ? sn_checkpoint_peek_meta(r->o.resume, "precision", buf, sizeof buf) : NULL;
    if (saved) {
        int q = sn_precision_parse(saved);
        if (q < 0)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: its precision \"%s\" is none sinter "
                           "knows (fp32, bf16, fp16, tf32): is it a checkpoint of a newer sinter?",
                           r->o.resume, saved);
        p = (sn_precision)q;
    }
    r->po.precision = r->o.precision = p;
    return SN_OK;
}

static sn_status setup(sn_session *r, sn_err *e) {
    const sn_session_opts *o = &r->o;
    sn_status s;
    if ((s = check_opts(&r->m, o, e)) || (s = load_data(o, r, e))) return s;
    r->B = o->batch;
    r->T = o->seq > 0 ? o->seq : r->m.ctx;
    long bt = (long)r->B * r->T;
    if (o->tokens_per_step && o->tokens_per_step % bt)
        return sn_fail(e, SN_ERR_INVALID, "--tokens-per-step %ld is not a multiple of batch x seq "
                       "= %d x %d = %ld: use %ld or %ld", o->tokens_per_step, r->B, r->T, bt,
                       o->tokens_per_step / bt * bt > 0 ? o->tokens_per_step / bt * bt : bt,
                       (o->tokens_per_step / bt + 1) * bt);
    if (o->tokens_per_step / bt > SN_SESSION_MAX_MICRO)
        return sn_fail(e, SN_ERR_INVALID, "--tokens-per-step %ld is %ld micro-batches of batch x seq "
                       "= %ld tokens a step, more than %d: use fewer tokens per step or a larger "
                       "--batch", o->tokens_per_step, o->tokens_per_step / bt, bt, SN_SESSION_MAX_MICRO);
    r->micro = o->tokens_per_step ? (int)(o->tokens_per_step / bt) : 1;

    /* the graph passes here; the trainer compiles the rest (fuse, memplan) with the same options */
    r->po = sn_pipeline_defaults();
    r->po.precision = o->precision;
    r->po.nf4 = o->nf4;
    r->po.base16 = !o->base_f32; /* in bf16 and fp16 only; frozen linear weights only */
    int policy = recompute_policy(o->checkpoint_policy);
    r->po.checkpoint = policy > 0 ? (sn_recompute_policy)policy : SN_RECOMPUTE_NONE;
    r->po.chunk_logits = o->chunk_logits > 0 ? o->chunk_logits : 0;
    r->po.fp8 = o->fp8;
    /* the device first: its target is the plan's and the program's (CUDA: its kernels, its
       fusion decisions, cuBLASLt's workspace) */
    if ((s = open_device(o, &r->dev, e))) return s;
    if (r->dev) r->po.target = &r->dev->target;
    if (o->precision_auto && (s = auto_precision(r, e))) return s;
    r->budget = o->mem;
    if (o->mem == SN_SESSION_MEM_AUTO && (s = mem_auto(r, e))) return s;
    if (o->mem) { /* the plan's micro-batch, accumulation steps and checkpointing */
        sn_plan_opts plo = {.batch = r->B, .budget = r->budget, .policy = policy, .compile = &r->po,
                            .offload = o->offload == SN_OFFLOAD_AUTO   ? SN_PLAN_OFFLOAD_AS_NEEDED
                                       : o->offload == SN_OFFLOAD_NONE ? SN_PLAN_OFFLOAD_NEVER
                                                                       : SN_PLAN_OFFLOAD_ALWAYS,
                            .offload_delay = o->offload_delay,
                            .chunk_logits = o->chunk_logits < 0 ? SN_CHUNK_LOGITS_AUTO : o->chunk_logits};
        /* a resumed run keeps its micro-batch (another would change its sums), the budget the
           rest: with mem auto the free memory can differ from the saving run's */
        int saved = o->resume ? resumed_micro_batch(o->resume) : 0;
        if (saved && r->B % saved == 0) plo.micro_batch = saved;
        if ((s = sn_plan_make(&plo, plan_graph, r, &r->plan, e))) {
            if (plo.micro_batch && s == SN_ERR_OOM) {
                char msg[sizeof e->msg];
                snprintf(msg, sizeof msg, "%s", e->msg);
                sn_fail(e, s, "%s was saved at micro-batch %d, which a resumed run keeps: %s",
                        o->resume, saved, msg);
            }
            return s;
        }
        r->planned = true;
        r->B = r->plan.micro_batch;
        r->micro = r->plan.accum;
        bt = (long)r->B * r->T;
        r->po.checkpoint = r->plan.policy;
        r->po.checkpoint_budget = r->plan.arena_budget;
        r->po.chunk_logits = r->plan.chunk_logits;
    }
    if ((s = build_graph(r, r->B, r->T, true, &r->g, e))) return s;
    r->po.backward = true;
    r->po.dump_after = o->dump_after;
    sn_pipeline_stats pst;
    if ((s = sn_compile(r->g, &r->po, NULL, &pst, e))) return s;
    r->fp8_products = pst.fp8_products;
    sn_train_opts to;
    sn_train_opts_default(&to, o->steps);
    to.lr = (float)o->lr;
    if (o->warmup >= 0) to.warmup = o->warmup;
    to.weight_decay = (float)o->weight_decay;
    to.beta1 = (float)o->beta1;
    to.beta2 = (float)o->beta2;
    to.grad_clip = (float)o->grad_clip;
    to.min_lr_frac = (float)o->min_lr_frac;
    to.seed = o->seed;
    to.device = r->dev;
    to.compile = &r->po;
    to.offload = r->planned ? r->plan.offload : o->offload == SN_OFFLOAD_OPTIMIZER;
    /* weights about to be loaded are not drawn first: only what the file lacks (a resumed
       run's nothing, a fine-tuning run's new adapters) is, after it */
    to.init_later = o->resume || o->init_pretrained || o->init;
    to.offload_delay = o->offload_delay;
    to.offload_threads = o->offload_threads;
    if (!(r->t = sn_trainer_new(r->g, &to, e))) return e->code;
    /* a planned run's evaluation program now: the plan counts its memory, measured after the
       first step (else it is made at the first validation) */
    if (r->planned && !sn_trainer_eval_program(r->t, e)) return e->code;
    if ((s = sn_val_iter_init(&r->vi, &r->val, r->B, r->T, e))) return s;
    r->x = sn_malloc(sizeof(int32_t) * (size_t)bt, "a batch of token ids", e);
    r->y = sn_malloc(sizeof(int32_t) * (size_t)bt, "a batch of token ids", e);
    if (!r->x || !r->y) return SN_ERR_OOM;
    set_meta(r);
    r->run.data_rng = sn_rng_seed(o->seed ^ 0x5eedull);
    if (o->resume) s = sn_checkpoint_load(o->resume, r->t, &r->run, e);
    else if (o->init_pretrained) s = init_pretrained(r, o->init_pretrained, e);
    else if (o->init) s = sn_checkpoint_init(o->init, r->t, &r->run, &r->init_fresh, e);
    return s ? s : sn_trainer_init_rest(r->t, e);
}

sn_status sn_session_new(const sn_model *m, const sn_session_opts *o, sn_session **out, sn_err *e) {
    *out = NULL;
    if (!m || !o) return sn_fail(e, SN_ERR_INVALID, "session: give a model and options (sn_session_defaults)");
    sn_session *r = sn_calloc(1, sizeof *r, "the training session", e);
    if (!r) return SN_ERR_OOM;
    r->m = *m;
    r->o = *o;
    sn_status s = setup(r, e);
    if (s) {
        sn_session_free(r);
        return s;
    }
    *out = r;
    return SN_OK;
}

sn_status sn_session_step(sn_session *r, sn_session_step_stats *st, sn_err *e) {
    sn_status s = SN_OK;
    for (int k = 0; k < r->micro && !s; k++)
        if (!(s = r->o.data_in_order
                      ? sn_batch_next(&r->train, r->B, r->T, &r->run.data_pos, r->x, r->y, e)
                      : sn_batch_sample(&r->train, r->B, r->T, &r->run.data_rng, r->x, r->y, e)))
            s = k + 1 < r->micro ? sn_trainer_accumulate(r->t, r->x, r->y, NULL, e)
                                 : sn_trainer_accumulate_last(r->t, r->x, r->y, NULL, e);
    sn_step_stats ss;
    if (s || (s = sn_trainer_update(r->t, &ss, e))) return s;
    int step = sn_trainer_step_count(r->t);
    if (st) *st = (sn_session_step_stats){.step = step, .loss = ss.loss, .grad_norm = ss.grad_norm,
                                          .lr = ss.lr, .skipped = ss.skipped,
                                          .loss_scale = ss.loss_scale};
    return sn_series_push(&r->run.train_loss, (double)step, ss.loss, e);
}

sn_status sn_session_validate(sn_session *r, double *out, sn_err *e) {
    double sum = 0;
    int n = 0;
    sn_val_iter_reset(&r->vi);
    int most = r->o.val_batches > 0 ? r->o.val_batches : 8;
    while (n < most && sn_val_iter_next(&r->vi, r->x, r->y)) {
        sn_status s;
        double l;
        if (r->stop && __atomic_load_n(r->stop, __ATOMIC_ACQUIRE)) {
            *out = -1;
            return SN_OK;
        }
        if ((s = sn_trainer_eval(r->t, r->x, r->y, &l, e))) return s;
        sum += l;
        n++;
    }
    *out = n ? sum / n : 0;
    return sn_series_push(&r->run.val_loss, (double)sn_trainer_step_count(r->t), *out, e);
}

void sn_session_set_stop(sn_session *r, const int *stop) { r->stop = stop; }

sn_status sn_session_save(sn_session *r, const char *path, sn_err *e) {
    return sn_checkpoint_save(path, r->t, &r->run, e);
}

sn_status sn_session_plot(const sn_session *r, const char *path, const char *title, sn_err *e) {
    return sn_plot_losses(path, title, &r->run.train_loss, &r->run.val_loss, e);
}

/* The forward graph for samples: the same model with one sequence of the training length,
 * through the same forward passes so that its parameters have the trainer's names and shapes. */
static sn_status build_sampler(sn_session *r, sn_err *e) {
    sn_status s = build_graph(r, 1, r->T, false, &r->sg, e);
    sn_pipeline_opts po = sn_pipeline_defaults(); /* the trainer's forward rewrites, no dump */
    po.precision = r->po.precision;
    po.nf4 = r->po.nf4; /* its NF4 storage gets the trainer's bytes (sn_sampler_load) */
    po.base16 = r->po.base16; /* its 16-bit base the trainer's weights, rounded again: exact */
    po.target = r->po.target;
    if (s || (s = sn_compile(r->sg, &po, NULL, NULL, e))) return s;
    const sn_node *idx = sn_graph_input(r->sg, SN_ROLE_TOKENS), *logits = r->sg->logits;
    if (!logits)
        return sn_fail(e, SN_ERR_INVALID, "sample: the model marks no logits: call "
                       "sn_graph_set_logits(g, logits) where it builds them");
    r->sampler = sn_sampler_new(r->sg, idx, logits, r->dev, e);
    return r->sampler ? SN_OK : e->code;
}

/* ---- samples over a KV cache (the model's build_kv) ---- */

/* The generator's graphs: the model's, over the tokenizer's vocabulary. */
static sn_status build_kv(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e) {
    const sn_session *r = user;
    return r->m.build_kv(g, B, T, r->tk->vocab, decode, r->m.user, e);
}

/* The trainer's weights for the generator's graphs, which the pad_vocab pass has not padded: a
 * table the pass grew from (V, ...) to (Vp, ...) gives its first V rows (the rest are padding,
 * never a class); every other parameter as sn_trainer_weights gives it. */
static sn_status unpadded_get(void *src, const sn_node *p, float *data, sn_err *e) {
    const sn_session *r = src;
    sn_weight_source w = sn_trainer_weights(r->t);
    int k = sn_trainer_find_param(r->t, p->name);
    const sn_node *tp = k < 0 ? NULL : sn_trainer_param_value(r->t, k);
    bool padded = tp && r->po.pad_vocab && p->dtype == SN_F32 && tp->rank == p->rank && p->rank >= 1 &&
                  tp->shape[0] == sn_pad_vocab_size(p->shape[0], r->po.pad_vocab) && tp->shape[0] > p->shape[0] &&
                  !memcmp(tp->shape + 1, p->shape + 1, sizeof(int64_t) * (size_t)(p->rank - 1));
    if (!padded) return w.get(w.src, p, data, e);
    float *all = sn_malloc(sizeof(float) * (size_t)sn_numel(tp), "a padded table's host copy", e);
    if (!all) return SN_ERR_OOM;
    sn_status s = sn_trainer_get_param(r->t, k, SN_PARAM_WEIGHTS, all, e);
    if (!s) memcpy(data, all, sizeof(float) * (size_t)sn_numel(p)); /* row-major: the first rows */
    free(all);
    return s;
}

/* The dtype the trainer holds its base in when the base16 pass stored it (bf16 or f16), else 0. */
static sn_dtype base16(const sn_session *r) {
    for (int i = 0; i < sn_trainer_param_count(r->t); i++) /* the pass stores the compute dtype */
        if (sn_trainer_param_16bit(r->t, i))
            return r->po.precision == SN_PRECISION_BF16 ? SN_BF16 : SN_F16;
    return (sn_dtype)0;
}

/* Whether a sample after n_prompt tokens goes through the KV cache: the model builds the
 * generation graphs, the prompt fits the training length (past it the generator's window
 * slides), and the run holds no memory plan (the generator's fp32 weights and cache are not in
 * it). An NF4 base stays NF4 in the generator (sn_generator_opts.nf4: the trainer's bytes), a
 * 16-bit base 16-bit (.base16: each product reads it widened), so no f32 copy of it appears. */
static bool kv_sampling(const sn_session *r, size_t n_prompt) {
    return r->m.build_kv && r->m.n_layer > 0 && !r->planned && n_prompt >= 1 &&
           n_prompt <= (size_t)r->T;
}

/* Makes the generator at the first KV sample; the decode graph must hold every parameter the
 * trainer trains (an adapter the generation graphs lack would sample from another model). */
static sn_status kv_generator(sn_session *r, sn_err *e) {
    if (r->gen) return SN_OK;
    sn_generator_opts go = {.build = build_kv, .user = r, .ctx = r->m.ctx, .n_layer = r->m.n_layer,
                            .batch = 1, .window = r->T, /* positions past T were never trained */
                            .nf4 = r->po.nf4, .base16 = base16(r)};
    sn_status s = sn_generator_new(&go, r->dev, &r->gen, e);
    const sn_graph *dg = s ? NULL : sn_generator_decode_graph(r->gen);
    for (int i = 0; !s && i < sn_trainer_param_count(r->t); i++) {
        const sn_node *p = sn_trainer_param_node(r->t, i);
        bool found = false;
        for (int j = 0; j < dg->n_nodes && !found; j++)
            found = dg->nodes[j]->op == SN_OP_PARAM && !strcmp(dg->nodes[j]->name, p->name);
        if (!found)
            s = sn_fail(e, SN_ERR_INVALID, "sample: model %s's generation graph (build_kv) has no "
                        "parameter %s, which the training graph has: build both with the same "
                        "parameters", r->m.name, p->name);
    }
    if (s) {
        sn_generator_free(r->gen);
        r->gen = NULL;
    }
    return s;
}

/* n_new ids after prompt[0, n) into gen, drawn over the KV cache with the current weights. */
static sn_status kv_sample(sn_session *r, const int32_t *prompt, int n, const sn_sample_opts *so,
                           int32_t *gen, sn_err *e) {
    sn_status s = kv_generator(r, e);
    if (!s) s = sn_generator_load(r->gen, (sn_weight_source){unpadded_get, r}, e);
    const int32_t *const prompts[1] = {prompt};
    return s ? s : sn_generator_generate(r->gen, prompts, &n, so, gen, NULL, NULL, e);
}

sn_status sn_session_sample(sn_session *r, const sn_session_sample_opts *o, char **text,
                            size_t *len, sn_err *e) {
    *text = NULL;
    *len = 0;
    if (o->n_new < 0) return sn_fail(e, SN_ERR_INVALID, "sample: n_new %d: give 0 or more tokens", o->n_new);
    sn_status s = SN_OK;
    sn_tokens p = {0}, all = {0};
    if (!s && o->prompt && *o->prompt) s = sn_tokenizer_encode(r->tk, o->prompt, strlen(o->prompt), &p, e);
    if (!s && !p.n) /* the validation text's first token, else a newline */
        s = r->val.n ? sn_tokens_push(&p, sn_tokens_get(&r->val, 0), e) : sn_tokenizer_encode(r->tk, "\n", 1, &p, e);
    int32_t *prompt = s ? NULL : sn_malloc(sizeof(int32_t) * (p.n + 1), "the prompt", e);
    int32_t *gen = s ? NULL : sn_malloc(sizeof(int32_t) * ((size_t)o->n_new + 1), "the sample", e);
    if (!s && (!prompt || !gen)) s = SN_ERR_OOM;
    for (size_t i = 0; !s && i < p.n; i++) prompt[i] = sn_tokens_get(&p, i);
    sn_sample_opts so = {.n_new = o->n_new, .temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                         .vocab = r->tk ? r->tk->vocab : 0, .seed = o->seed};
    bool kv = !s && kv_sampling(r, p.n);
    if (!s && kv && o->n_new) s = kv_sample(r, prompt, (int)p.n, &so, gen, e);
    if (!s && !kv && !r->sampler) s = build_sampler(r, e);
    if (!s && !kv) s = sn_sampler_load(r->sampler, r->t, e);
    if (!s && !kv) s = sn_sampler_generate(r->sampler, prompt, (int)p.n, &so, gen, e);
    for (size_t i = 0; !s && i < p.n + (size_t)o->n_new; i++)
        s = sn_tokens_push(&all, i < p.n ? prompt[i] : gen[i - p.n], e);
    if (!s) s = sn_tokenizer_decode_all(r->tk, &all, 0, all.n, text, len, e);
    sn_tokens_free(&p);
    sn_tokens_free(&all);
    free(prompt);
    free(gen);
    return s;
}

void sn_session_info_get(const sn_session *r, sn_session_info *out) {
    *out = (sn_session_info){.model = r->m.name, .tokenizer = r->tk->name,
                             .device = sn_trainer_device_name(r->t), .vocab = r->tk->vocab,
                             .batch = r->B, .seq = r->T, .micro = r->micro,
                             .tokens_per_step = (long)r->micro * r->B * r->T,
                             .params = sn_graph_param_count(r->g), .init_fresh = r->init_fresh,
                             .train_tokens = r->train.n,
                             .val_tokens = r->val.n, .train_shards = r->train_shards,
                             .val_shards = r->val_shards, .step = sn_trainer_step_count(r->t),
                             .steps = r->o.steps, .loss_scaling = sn_trainer_loss_scaling(r->t),
                             .loss_scale = sn_trainer_scaler(r->t).scale,
                             .steps_skipped = sn_trainer_scaler(r->t).skipped,
                             .host_measured = sn_trainer_host_state_bytes(r->t),
                             .precision = r->po.precision, .fp8_products = r->fp8_products};
    out->offload = out->host_measured > 0;
    out->cuda_sm = r->dev && r->dev->target.kind == SN_TARGET_CUDA ? r->dev->target.sm : 0;
    out->trained = sn_param_layout_trained(sn_trainer_layout(r->t));
    if (!r->planned) return;
    out->mem_planned = r->plan.total;
    out->mem_budget = r->budget;
    out->mem_free = r->o.mem == SN_SESSION_MEM_AUTO ? r->mem_free : 0;
    out->host_planned = r->plan.opt_host;
    const struct sn_exec *x = sn_trainer_exec(r->t);
    if (!x || !sn_trainer_step_count(r->t)) return;
    sn_exec_stats st;
    sn_exec_stats_get(x, &st);
    out->mem_measured = st.arena_peak_bytes + st.persistent_bytes + st.buffer_bytes + r->plan.workspace;
    if ((x = sn_trainer_eval_exec(r->t))) { /* validation's program: its own memory */
        sn_exec_stats es;
        sn_exec_stats_get(x, &es);
        out->mem_measured += es.persistent_bytes + (es.arena_shared ? 0 : es.arena_bytes);
    }
}

void sn_session_plan_print(const sn_session *r, FILE *f) {
    if (r->planned) sn_plan_print(&r->plan, r->budget, f);
}
