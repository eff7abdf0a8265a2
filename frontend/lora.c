/* lora.c: LoRA adapters (lora.h). Convention: the adapter's names are the layer's prefix with
 * ".lora_a" and ".lora_b", so checkpoints say which layer an adapter belongs to. */
#include "frontend.h"
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char SUFFIX_A[] = ".lora_a", SUFFIX_B[] = ".lora_b";

sn_node *sn_lora_path(sn_graph *g, sn_node *x, const char *prefix, int64_t in, int64_t out,
                      const sn_lora *l) {
    SN_ASSERT(l && l->rank >= 1 && l->alpha > 0);
    char a_name[128], b_name[128];
    if ((size_t)snprintf(a_name, sizeof a_name, "%s%s", prefix, SUFFIX_A) >= sizeof a_name ||
        (size_t)snprintf(b_name, sizeof b_name, "%s%s", prefix, SUFFIX_B) >= sizeof b_name) {
        if (!g->err.code)
            sn_fail(&g->err, SN_ERR_INVALID, "lora: layer name '%s' is too long for its adapters' "
                    "names (at most %zu bytes)", prefix, sizeof a_name - sizeof SUFFIX_A);
        return NULL;
    }
    int64_t r = l->rank;
    sn_node *a = sn_param(g, a_name, SN_F32, SN_SHAPE(in, r), SN_INIT_NORMAL, 1.0f / sqrtf((float)in));
    sn_node *b = sn_param(g, b_name, SN_F32, SN_SHAPE(r, out), SN_INIT_ZEROS, 0);
    sn_node *h = sn_matmul(g, x, a); /* (..., r) */
    float scale = l->alpha / (float)l->rank;
    if (scale != 1.0f) h = sn_scale(g, h, scale);
    return sn_matmul(g, h, b); /* (..., out) */
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool sn_lora_is_adapter(const char *name) {
    return name && (ends_with(name, SUFFIX_A) || ends_with(name, SUFFIX_B));
}

int64_t sn_lora_freeze_base(sn_graph *g) {
    int64_t trained = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        sn_node *n = g->nodes[i];
        if (n->op != SN_OP_PARAM) continue;
        if (sn_lora_is_adapter(n->name)) trained += sn_numel(n);
        else sn_param_freeze(n);
    }
    return trained;
}
