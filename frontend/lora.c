/* lora.c: LoRA adapters (lora.h). Convention: the adapter's names are the layer's prefix with
 * ".lora_a" and ".lora_b", so checkpoints say which layer an adapter belongs to. */
#include "frontend.h"
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char SUFFIX_A[] = ".lora_a", SUFFIX_B[] = ".lora_b";

bool sn_lora_params(sn_graph *g, const char *prefix, int64_t in, int64_t out, const sn_lora *l,
                    sn_node **a, sn_node **b) {
    SN_ASSERT(l && l->rank >= 1 && l->alpha > 0);
    char a_name[128], b_name[128];
    *a = *b = NULL;
    if ((size_t)snprintf(a_name, sizeof a_name, "%s%s", prefix, SUFFIX_A) >= sizeof a_name ||
        (size_t)snprintf(b_name, sizeof b_name, "%s%s", prefix, SUFFIX_B) >= sizeof b_name) {
        if (!g->err.code)
            sn_fail(&g->err, SN_ERR_INVALID, "lora: layer name '%s' is too long for its adapters' "
                    "names (at most %zu bytes)", prefix, sizeof a_name - sizeof SUFFIX_A);
        return false;
    }
    int64_t r = l->rank;
    *a = sn_param(g, a_name, SN_F32, SN_SHAPE(in, r), SN_INIT_NORMAL, 1.0f / sqrtf((float)in));
    *b = sn_param(g, b_name, SN_F32, SN_SHAPE(r, out), SN_INIT_ZEROS, 0);
    return *a && *b;
}

void sn_lora_paths(sn_graph *g, sn_node *x, int n, sn_node *const a[], sn_node *const b[],
                   const sn_lora *l, sn_node *out[]) {
    SN_ASSERT(n >= 1 && n <= SN_LORA_MAX_PATHS && l && l->rank >= 1 && l->alpha > 0);
    int64_t r = l->rank;
    sn_node *h = sn_matmul(g, x, n == 1 ? a[0] : sn_concat(g, n, a, -1)); /* (..., n r) */
    float scale = l->alpha / (float)l->rank;
    if (scale != 1.0f) h = sn_scale(g, h, scale);
    for (int i = 0; i < n; i++)
        out[i] = sn_matmul(g, n == 1 ? h : sn_slice(g, h, -1, i * r, (i + 1) * r), b[i]); /* (..., out_i) */
}

sn_node *sn_lora_path(sn_graph *g, sn_node *x, const char *prefix, int64_t in, int64_t out,
                      const sn_lora *l) {
    sn_node *a, *b, *y;
    if (!sn_lora_params(g, prefix, in, out, l, &a, &b)) return NULL;
    sn_lora_paths(g, x, 1, &a, &b, l, &y);
    return y;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool sn_lora_is_adapter(const char *name) {
    return name && (ends_with(name, SUFFIX_A) || ends_with(name, SUFFIX_B));
}

int64_t sn_freeze_unless(sn_graph *g, bool (*trained)(const char *name)) {
    int64_t n_trained = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        sn_node *n = g->nodes[i];
        if (n->op != SN_OP_PARAM) continue;
        if (trained(n->name)) n_trained += sn_numel(n);
        else sn_param_freeze(n);
    }
    return n_trained;
}

int64_t sn_lora_freeze_base(sn_graph *g) { return sn_freeze_unless(g, sn_lora_is_adapter); }
