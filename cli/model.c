/* model.c: the models --model names for sinter graph and sinter plan: GPT-2's configurations
 * and the LLaMA family's built-in shapes, found by name with the vocabulary the run's tokenizer
 * gives them, or a pretrained directory's config.json describes, and built into a graph.
 * (sinter train and generate build theirs through a session.) */
#include <stdio.h>

#include "io/hf_llama.h"
#include "io/weights.h"
#include "cli.h"

const char *cli_model_names(void) {
    static char names[512];
    if (!names[0]) snprintf(names, sizeof names, "%s, %s", sn_gpt2_config_names(), sn_llama_config_names());
    return names;
}

void cli_model_find(const char *name, const char *tokenizer, cli_model *m) {
    *m = (cli_model){0};
    if ((m->llama = sn_llama_config_find(name, &m->lc))) {
        if (tokenizer) m->lc.vocab = cli_vocab(NULL, tokenizer); /* else its own */
    } else {
        sn_gpt2_config_find(name, &m->c); /* the option table checked the name */
        m->c.vocab = cli_vocab(&m->c, tokenizer); /* as sinter train's tokenizer makes it */
    }
}

sn_status cli_model_from_hf(const char *path, cli_model *m, sn_err *e) {
    *m = (cli_model){0};
    if ((m->llama = sn_hf_is_llama(path))) return sn_hf_llama_read_config(path, &m->lc, e);
    return sn_weights_read_config(path, &m->c, e);
}

int cli_model_ctx(const cli_model *m) { return m->llama ? m->lc.ctx : m->c.ctx; }

void cli_model_describe(const cli_model *m, char *buf, size_t len) {
    const sn_llama_config *l = &m->lc;
    if (m->llama)
        snprintf(buf, len, "vocab %d, context %d, %d layers, %d/%d heads of %d, hidden %d, MLP %d",
                 l->vocab, l->ctx, l->n_layer, l->n_head, l->n_kv_head, l->head_dim, l->hidden,
                 l->intermediate);
    else
        snprintf(buf, len, "vocab %d, context %d, %d layers, %d heads, %d channels", m->c.vocab,
                 m->c.ctx, m->c.n_layer, m->c.n_head, m->c.n_embd);
}

sn_status cli_model_build(const cli_model *m, const sn_gpt2_lora *lora, int B, int T, sn_graph *g,
                          sn_node **loss, sn_err *e) {
    sn_status s;
    if (m->llama) {
        sn_llama lm;
        s = sn_llama_build_lora(g, &m->lc, B, T, lora, &lm, e);
        *loss = lm.loss;
    } else {
        sn_gpt2 gm;
        s = sn_gpt2_build_lora(g, &m->c, B, T, lora, &gm, e);
        *loss = gm.loss;
    }
    return s;
}
