/* tsan_offload_job.c: the delayed update's job (train/offload.h sn_offload_job) under
 * ThreadSanitizer (tools/tsan_job builds and runs it; CI runs the tool): a caller reading each
 * part of the weights as soon as sn_offload_job_wait says it is done, as the runner's uploads
 * read it, races with nothing; the parts in turn give what one AdamW over the whole range gives,
 * bit for bit. A job that said a part was done before doing it was reported as a data race
 * (planted, 2026-11-29), where test_offload_adamw's timing could not see it. Exit 0: clean. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/offload.h"

enum { PARTS = 6, REPS = 10 };

int main(void) {
    int64_t n = 3 * 65537 + 11, cut[PARTS + 1] = {0, 5, 4099, 65537, 70000, 2 * 65537 + 3, n};
    float *p = calloc((size_t)n, 4), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4),
          *g = calloc((size_t)n, 4), *want = calloc((size_t)n, 4), *wm = calloc((size_t)n, 4),
          *wv = calloc((size_t)n, 4);
    uint16_t *low = calloc((size_t)n, 2), *wlow = calloc((size_t)n, 2);
    sn_pool *pool = sn_pool_new(3);
    if (!p || !m || !v || !g || !want || !wm || !wv || !low || !wlow || !pool) return 2;
    for (int64_t i = 0; i < n; i++)
        p[i] = want[i] = (float)(i % 97) * 0.01f - 0.4f, g[i] = (float)(i % 13) - 6.0f;
    float h[SN_OPT_SCALARS] = {0};
    h[SN_OPT_LR] = 1e-3f, h[SN_OPT_BETA1] = 0.9f, h[SN_OPT_BETA2] = 0.95f, h[SN_OPT_EPS] = 1e-8f;
    h[SN_OPT_WD] = 0.1f, h[SN_OPT_BC1] = 0.1f, h[SN_OPT_BC2] = 0.05f, h[SN_OPT_SCALE] = 1.0f;
    h[SN_OPT_INV_MICRO] = 1.0f;
    sn_offload_range order[PARTS]; /* back to front, as the backward frees the weights */
    for (int i = 0; i < PARTS; i++)
        order[i] = (sn_offload_range){cut[PARTS - 1 - i], cut[PARTS - i] - cut[PARTS - 1 - i]};
    double seen = 0;
    for (int rep = 0; rep < REPS; rep++) {
        sn_offload_adamw(pool, h, want, wm, wv, g, wlow, SN_BF16, n, 70001);
        sn_offload_job job = {.pool = pool, .threaded = true};
        sn_offload_job_start(&job, h, p, m, v, g, low, SN_BF16, n, 70001, order, PARTS);
        for (int k = 1; k <= PARTS; k++) {
            sn_offload_job_wait(&job, k);
            for (int64_t i = order[k - 1].lo; i < order[k - 1].lo + order[k - 1].n; i++)
                seen += (double)p[i] + low[i]; /* what an upload reads */
        }
        sn_offload_job_free(&job);
        if (memcmp(p, want, 4 * (size_t)n) || memcmp(m, wm, 4 * (size_t)n) ||
            memcmp(v, wv, 4 * (size_t)n) || memcmp(low, wlow, 2 * (size_t)n)) {
            fprintf(stderr, "tsan_offload_job: step %d: the parts differ from one AdamW\n", rep + 1);
            return 1;
        }
    }
    printf("tsan_offload_job: %d updates in %d parts each, read as they were done (%g)\n", REPS,
           PARTS, seen);
    sn_pool_free(pool);
    free(p), free(m), free(v), free(g), free(want), free(wm), free(wv), free(low), free(wlow);
    return 0;
}
