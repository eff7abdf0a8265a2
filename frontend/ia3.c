/* ia3.c: (IA)^3 vectors (ia3.h). Convention: a vector's name is its module's with ".ia3_l", the
 * tensor name PEFT saves, so a checkpoint says which module each vector rescales. */
#include "frontend.h"
#include "ia3.h"
#include "lora.h"

#include <stdio.h>
#include <string.h>

static const char SUFFIX[] = ".ia3_l";

sn_node *sn_ia3_vector(sn_graph *g, const char *prefix, int64_t n) {
    char name[128];
    if ((size_t)snprintf(name, sizeof name, "%s%s", prefix, SUFFIX) >= sizeof name) {
        if (!g->err.code)
            sn_fail(&g->err, SN_ERR_INVALID, "ia3: module name '%s' is too long for its vector's "
                    "name (at most %zu bytes)", prefix, sizeof name - sizeof SUFFIX);
        return NULL;
    }
    return sn_param(g, name, SN_F32, SN_SHAPE(n), SN_INIT_ONES, 0);
}

sn_node *sn_ia3_scale(sn_graph *g, sn_node *x, sn_node *l) { return sn_mul(g, x, l); }

bool sn_ia3_is_vector(const char *name) {
    size_t n = name ? strlen(name) : 0, k = sizeof SUFFIX - 1;
    return n > k && !strcmp(name + n - k, SUFFIX);
}

bool sn_is_adapter(const char *name) { return sn_ia3_is_vector(name) || sn_lora_is_adapter(name); }

int64_t sn_ia3_freeze_base(sn_graph *g) { return sn_freeze_unless(g, sn_ia3_is_vector); }
