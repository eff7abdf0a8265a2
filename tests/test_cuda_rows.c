/* test_cuda_rows.c: the CUDA row and column-reduce kernels on a machine without a GPU (the
 * norms, softmax, the causal mask, cross-entropy's classifier and their backwards; the norm
 * backward pairs and their FINISH kernels, joined or apart; column reductions): the path each
 * takes in its rendered text (a warp or a block a row, vectors of 4 or 8 columns, rows kept in
 * registers or taken in turn), NVRTC without spills, and each run on the SIMT simulator against
 * the interpreter in both thread orders, with bugs planted in the text caught. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "passes/passes.h"

/* Row ops over rows of C, cross-entropy with ignored targets (class 3), rmsnorm, a max and a
 * mean reduction, with their backwards. */
static sn_graph *row_ops_graph(int64_t C) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(24, C));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(24));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *h = sn_layernorm(g, sn_add(g, x, b), w, b, 1e-5f);
    sn_node *r = sn_rmsnorm(g, sn_gelu(g, h), v, 1e-5f);
    sn_node *s = sn_softmax(g, sn_scale(g, r, 0.5f));
    sn_node *loss = sn_cross_entropy(g, sn_add(g, sn_scale(g, s, 4.0f), h), y, 3);
    sn_graph_add_output(g, sn_max(g, h, 1, false));
    sn_graph_add_output(g, sn_mean(g, r, 0, false));
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* ... on the simulator against the interpreter; every whole-row kernel (the norms, softmax and
 * their backwards) a warp per row at C = 300 (3 steps of 32 lanes x 4), a block per row (of 9
 * warps) at C = 1100 (too long for a warp: 9 steps). */
static void row_ops(int64_t C, bool warp_rows) {
    sn_graph *g = row_ops_graph(C);
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_ROW, ks), whole = 0;
    for (int i = 0; i < n; i++) {
        if (ks[i]->stage != SN_SUM_WHOLE || ks[i]->anchor->op == SN_OP_CROSS_ENTROPY_BWD) continue;
        sn_cuda_source cs = render(&ks[i], 1);
        ck_assert_msg(!strstr(cs.src, ": a warp per row */") == !warp_rows, "%s at C = %lld: %s "
                      "warp per row expected in\n%s", ks[i]->name, (long long)C,
                      warp_rows ? "a" : "no", cs.src);
        sn_cuda_source_free(&cs);
        whole++;
    }
    ck_assert_int_ge(whole, 4);
    free(ks);
    sn_program_free(p);
    int counts[SN_KER_KIND_COUNT] = {0};
    int ran = run_on_host(g, 8, false, 1e-5, counts);
    if (ran) printf("test_cuda_rows: row ops over rows of %lld (%s): %d kernels (%d row, %d reduce) "
                    "match\n", (long long)C, warp_rows ? "a warp per row" : "a block per row",
                    ran, counts[SN_KER_ROW], counts[SN_KER_REDUCE]);
    sn_graph_free(g);
}

START_TEST(cpu_row_ops_several_warps) { row_ops(1100, false); }
END_TEST

START_TEST(cpu_row_ops_warp_per_row) { row_ops(300, true); }
END_TEST

/* A layernorm over 197 rows after a linear layer with a bias: its weight gradient, dbeta and
 * the bias gradient in a PARTIAL kernel over 25 chunks of 8 rows (the last one 5: kernel.h
 * sn_sum_chunk_rows, few rows) and its FINISH kernel, the cross-entropy loss over 4 chunks of
 * 64 the same way, against the interpreter, the partial sums the same bits in both thread
 * orders. */
enum { CHUNKED_R = 3 * SN_SUM_CHUNK + 5 };
static sn_graph *chunked_sums_graph(void) {
    enum { R = CHUNKED_R };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, 24));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(R));
    sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(24, 40), SN_INIT_NORMAL, 0.3f);
    sn_node *c = sn_param(g, "c", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *h = sn_layernorm(g, sn_add(g, sn_matmul(g, x, w1), c), w, b, 1e-5f);
    sn_node *loss = sn_cross_entropy(g, h, y, -1);
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

START_TEST(cpu_chunked_weight_gradient) {
    sn_graph *g = chunked_sums_graph();
    sn_program *p = fuse(g);
    int partial = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        if (ker->stage != SN_SUM_PARTIAL) continue;
        partial++;
        /* the classifier (the loss with its gradient): a partial a row */
        ck_assert_int_eq(sn_sum_chunks(ker), ker->anchor2 ? CHUNKED_R : (CHUNKED_R + 7) / 8);
        ck_assert_int_eq(sn_sum_chunk_rows(ker), ker->anchor2 ? SN_SUM_CHUNK : 8);
        bool ce = ker->anchor->op == SN_OP_CROSS_ENTROPY || ker->anchor2; /* the loss */
        ck_assert_int_eq(ker->row.n_colsum, ce ? 0 : 2); /* dbeta and the bias gradient */
    }
    ck_assert_int_eq(partial, 2);
    sn_program_free(p);
    int counts[SN_KER_KIND_COUNT] = {0};
    int n = run_on_host(g, 40, false, 1e-5, counts);
    if (n) printf("test_cuda_rows: layernorm weight gradient over 4 chunks of rows: %d kernels match\n", n);
    sn_graph_free(g);
}
END_TEST

/* kernel.h sn_sum_chunk_rows: a norm weight gradient's chunks of rows halve from 64 down to 8
 * while fewer than 128 chunks would share the rows (CUDA blocks for the whole GPU); cross-
 * entropy's stay 64 rows whatever the count. */
START_TEST(sum_chunk_rule) {
    static const struct { int64_t R, rows; } c[] = {{197, 8},   {1024, 8},  {2051, 16},
                                                    {4096, 32}, {8192, 64}, {16384, 64}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(c[i].R, 32));
        sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(c[i].R, 32));
        sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(c[i].R));
        sn_graph_add_output(g, sn_layernorm_bwd_w(g, x, dy, 1e-5f));
        sn_graph_add_output(g, sn_cross_entropy(g, dy, y, -1));
        sn_program *p = fuse(g);
        int seen = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->stage != SN_SUM_PARTIAL) continue;
            bool norm = ker->anchor->op == SN_OP_LAYERNORM_BWD_W;
            int64_t rows = norm ? c[i].rows : SN_SUM_CHUNK;
            ck_assert_int_eq(sn_sum_chunk_rows(ker), rows);
            ck_assert_int_eq(sn_sum_chunks(ker), (c[i].R + rows - 1) / rows);
            seen |= norm ? 1 : 2;
        }
        ck_assert_int_eq(seen, 3);
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* The norm backward pair (kernel.h: a norm weight gradient's PARTIAL kernel computing its dx
 * too) over R rows in chunks of 8 (197 rows: the last chunk 5) or of 16 (2051: the last 3; kernel.h
 * sn_sum_chunk_rows): dx with a prologue (dy, widened from
 * d0's dtype) and an epilogue (a residual add), dw, dbeta (the column sum of dy) and the
 * residual's bias gradient (the column sum of dx, read from the pair's own output after the
 * block's rows are stored), f32 rows of 40 (4 columns a step) and bf16 d0 with rows of 64 (8).
 * Against the interpreter through its FINISH kernel, in both thread orders; then bugs planted
 * in the rendered text are caught: the barrier before the sums deleted, a warp's dy xhat sums
 * read from another lane's slots. */
static sn_graph *norm_pair_graph(sn_dtype dt, int64_t C, int64_t R, bool apart) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, C));
    sn_node *d0 = sn_input(g, "d0", dt, SN_SHAPE(R, C));
    sn_node *gr = sn_input(g, "g", SN_F32, SN_SHAPE(R, C));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    /* f32: dy computed and stored (the column sum reads it); bf16: each reader its own cast
     * of d0, as the upcast pass leaves them (dx's and dw's x and dy are one value) */
    sn_node *dy = dt == SN_F32 ? sn_mul(g, d0, sn_exp(g, x)) : sn_cast(g, d0, SN_F32);
    sn_node *dx = sn_add(g, gr, sn_layernorm_bwd(g, x, w, dy, 1e-5f));
    if (apart) sn_graph_add_output(g, sn_exp(g, gr)); /* a kernel between dx's and dw's */
    if (dt != SN_F32) dy = sn_cast(g, d0, SN_F32);
    sn_node *dw = sn_layernorm_bwd_w(g, x, dy, 1e-5f);
    if (dt != SN_F32) dy = sn_cast(g, d0, SN_F32);
    sn_node *outs[] = {dx, dw, sn_sum(g, dy, 0, false), sn_sum(g, dx, 0, false)};
    for (int i = 0; i < 4; i++) sn_graph_add_output(g, outs[i]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

/* The worst error of the pair ks[0] and its FINISH ks[1] rendered as src (caught mode). */
static double pair_on_host(const char *src, const sn_kernel *const *ks, const sn_cuda_source *cs,
                           const sn_interp *it) {
    sn_sim_module *h = host_compile(src);
    if (!h) return -1;
    double a = host_check(h, ks[0], cs->fn[0], it, 1e-5, true);
    double b = host_check(h, ks[1], cs->fn[1], it, 1e-5, true);
    sn_sim_module_free(h);
    return a > b ? a : b;
}

/* Runs every kernel of p on the simulator (forward order) with the interpreter's values of the
 * graph's inputs, a buffer a node (out[id], malloc'd) and one per scratch value; a joined
 * FINISH's buffers after its host's (kernel.h: tail). edits (NULL: none): pairs of strings, the
 * first occurrence of each `from` in the rendered text replaced by its `to` (a planted bug),
 * ended by a NULL. */
static void program_on_host_with(const sn_program *p, const sn_interp *it, void **out,
                                 const char *const *edits) {
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    ck_assert(ks);
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    sn_cuda_source cs = render(ks, n);
    char *src = strdup(cs.src);
    for (int i = 0; edits && edits[i]; i += 2) {
        const char *from = edits[i], *to = edits[i + 1], *at = strstr(src, from);
        ck_assert_msg(at, "no \"%s\" in the source", from);
        size_t head = (size_t)(at - src);
        char *next = malloc(strlen(src) + strlen(to) + 1);
        ck_assert(next);
        memcpy(next, src, head);
        strcpy(next + head, to);
        strcat(next, at + strlen(from));
        free(src);
        src = next;
    }
    sn_sim_module *h = host_compile(src);
    float *scratch[64] = {0};
    for (int i = 0; h && i < n; i++) {
        void *params[SN_KER_MAX_BUFS], *buf[SN_KER_MAX_BUFS];
        int at = 0;
        for (const sn_kernel *k = ks[i]; k; k = k->tail) {
            for (int a = 0; a < k->n_out + k->n_in; a++, at++) {
                const sn_node *x = k->args[a];
                if (!out[x->id]) {
                    out[x->id] = calloc(1, dtype_bytes(x->dtype) * (size_t)sn_numel(x) + 64);
                    if (x->op == SN_OP_INPUT || x->op == SN_OP_PARAM)
                        to_buffer(x->dtype, sn_interp_value(it, x), sn_numel(x), out[x->id]);
                }
                buf[at] = out[x->id];
                params[at] = &buf[at];
            }
            if (k->stage != SN_SUM_WHOLE) {
                ck_assert(k->scratch >= 0 && k->scratch < 64);
                if (!scratch[k->scratch]) scratch[k->scratch] = calloc(1, (size_t)sn_kernel_scratch_bytes(k));
                buf[at] = scratch[k->scratch];
                params[at] = &buf[at];
                at++;
            }
        }
        ck_assert_int_eq(at, sn_kernel_n_bufs(ks[i]));
        sn_target t = sm(80);
        sn_cuda_dims d = sn_cuda_launch_dims(ks[i], &t);
        sn_sim_opts so = sn_sim_defaults();
        sn_err e;
        ck_assert_msg(sn_sim_launch(h, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &so, &e) == SN_OK,
                      "%s", e.msg);
    }
    for (int i = 0; i < 64; i++) free(scratch[i]);
    if (h) sn_sim_module_free(h);
    free(src);
    sn_cuda_source_free(&cs);
    free(ks);
}

static void program_on_host(const sn_program *p, const sn_interp *it, void **out) {
    program_on_host_with(p, it, out, NULL);
}

/* Each case rendered for sm_80 (_i < 4), where the pair reads its rows in every pass, and for
 * sm_90, where it keeps them in registers (cuda_row.h; C = 320: two steps of 256 columns, the
 * second a quarter full). */
START_TEST(cpu_norm_pair) {
    static const struct { sn_dtype dt; int64_t C, R, chunk; } all[4] = {
        {SN_F32, 40, 3 * SN_SUM_CHUNK + 5, 8}, {SN_BF16, 64, 3 * SN_SUM_CHUNK + 5, 8},
        {SN_BF16, 64, 2051, 16}, {SN_BF16, 320, 3 * SN_SUM_CHUNK + 5, 8}};
    const typeof(all[0]) *c = &all[_i % 4];
    render_sm = _i < 4 ? 80 : 90;
    /* first the same bits as the dx kernel and the PARTIAL kernel apart (the same columns a
     * step: the sums keep their order) */
    sn_graph *ga = norm_pair_graph(c->dt, c->C, c->R, true);
    sn_graph *g = norm_pair_graph(c->dt, c->C, c->R, false);
    sn_program *pa = fuse(ga), *p = fuse(g);
    ck_assert_int_eq(pa->n_kernels, 4); /* dx, exp, dw's PARTIAL and FINISH */
    sn_interp *ita = interp_run(ga, 1, false), *it = interp_run(g, 1, false);
    void **va = calloc((size_t)ga->n_nodes, sizeof *va), **v = calloc((size_t)g->n_nodes, sizeof *v);
    program_on_host(pa, ita, va);
    program_on_host(p, it, v);
    for (int o = 0; o < g->n_outputs; o++) {
        const sn_node *x = g->outputs[o], *xa = ga->outputs[o + 1]; /* after exp */
        ck_assert_int_eq(sn_numel(x), sn_numel(xa));
        if (va[xa->id] && v[x->id]) /* (a build without the simulator runs nothing) */
            ck_assert_msg(!memcmp(va[xa->id], v[x->id], 4 * (size_t)sn_numel(x)),
                          "output %d (%s) differs from the unpaired kernels' bits", o,
                          sn_op_name(x->op));
    }
    for (int i = 0; i < ga->n_nodes; i++) free(va[i]);
    for (int i = 0; i < g->n_nodes; i++) free(v[i]);
    free(va);
    free(v);
    sn_interp_free(ita);
    sn_program_free(pa);
    sn_graph_free(ga);
    /* then the pair and its FINISH against the interpreter, and planted bugs */
    const sn_kernel *ks[2] = {NULL, NULL};
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        if (k->kind == SN_KER_ROW && k->row.pair) ks[0] = k;
        if (ks[0] && k->stage == SN_SUM_FINISH && k->scratch == ks[0]->scratch) ks[1] = k;
    }
    ck_assert_msg(ks[0] && ks[1], "no norm backward pair and its FINISH");
    ck_assert_int_eq(p->n_kernels, 2); /* dx, dw and both column sums: two kernels */
    ck_assert_int_eq(ks[0]->row.n_colsum, 2);
    ck_assert_int_lt(ks[0]->row.colsum_src[2], ks[0]->n_out); /* dx's own output */
    ck_assert_int_eq(sn_sum_chunk_rows(ks[0]), c->chunk);
    sn_cuda_source cs = render(ks, 2);
    char want[32];
    snprintf(want, sizeof want, "/* %d columns a step */", c->dt == SN_BF16 ? 8 : 4);
    ck_assert_msg(strstr(cs.src, want), "%s: no \"%s\" in its source", ks[0]->name, want);
    ck_assert_msg(!strstr(cs.src, "the row's values kept in registers") == (render_sm < 90),
                  "%s on sm_%d: the row %s in registers", ks[0]->name, render_sm,
                  render_sm < 90 ? "kept" : "not kept");
    double ok = pair_on_host(cs.src, ks, &cs, it);
    if (ok >= 0) ck_assert_msg(ok <= 1e-5, "the pair's error %g", ok);
    static const struct { const char *what, *at, *from, *to; } bugs[2] = {
        {"the barrier before the sums deleted", "__syncthreads(); /* the warps' sums",
         "__syncthreads();", "                "},
        {"a warp's sums read from another lane's slots", "float sum = dw[0][s];", "[s]", "[s ^ 1]"},
    };
    for (int b = 0; b < 2 && ok >= 0; b++) {
        const char *at = strstr(cs.src, bugs[b].at);
        ck_assert_msg(at, "%s: no \"%s\" in its source", ks[0]->name, bugs[b].at);
        const char *from = strstr(at, bugs[b].from);
        size_t head = (size_t)(from - cs.src), len = strlen(cs.src);
        char *bad = malloc(len + 16);
        memcpy(bad, cs.src, head);
        strcpy(bad + head, bugs[b].to);
        strcat(bad, from + strlen(bugs[b].from));
        double err = pair_on_host(bad, ks, &cs, it);
        printf("test_cuda_rows: the norm backward pair (%s, C=%lld) with %s: error %.3g (caught)\n",
               sn_dtype_name(c->dt), (long long)c->C, bugs[b].what, err);
        ck_assert_msg(!(err <= 1e-5), "%s went unnoticed (error %g)", bugs[b].what, err);
        free(bad);
    }
    sn_interp_free(it);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
    render_sm = 80;
}
END_TEST

/* A joined FINISH (kernel.h: tail; passes/join_finish.c): two norm backward pairs in a chain
 * (the second's dy is the first's dx), 197 rows of 160 in 25 chunks of 8 (the last 5): the first
 * pair's FINISH (320 columns: dw and dbeta) joins the second pair's launch as 2 blocks of 256
 * threads after its 25. Its dx, sums and the second pair's are the separate kernels' bits on the
 * simulator; then bugs planted in the dispatch are caught: the FINISH's blocks offset by one
 * (its first 256 columns never summed), and the host's last block sent to the FINISH (its
 * last chunk of rows skipped). */
static sn_graph *joined_finish_graph(sn_dtype dt) {
    enum { R = 3 * SN_SUM_CHUNK + 5, C = 160 };
    sn_graph *g = sn_graph_new();
    sn_node *x1 = sn_input(g, "x1", SN_F32, SN_SHAPE(R, C));
    sn_node *x2 = sn_input(g, "x2", SN_F32, SN_SHAPE(R, C));
    sn_node *d0 = sn_input(g, "d0", dt, SN_SHAPE(R, C));
    sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    /* bf16: dy widened by each reader, as the upcast pass leaves it (norm_pair_graph) */
    bool f32 = dt == SN_F32;
    sn_node *dy1 = f32 ? sn_mul(g, d0, sn_exp(g, x1)) : sn_cast(g, d0, SN_F32);
    sn_node *dx1 = sn_layernorm_bwd(g, x1, w1, dy1, 1e-5f);
    sn_node *dw1 = sn_layernorm_bwd_w(g, x1, f32 ? dy1 : sn_cast(g, d0, SN_F32), 1e-5f);
    sn_node *db1 = sn_sum(g, f32 ? dy1 : sn_cast(g, d0, SN_F32), 0, false);
    sn_node *h = f32 ? dx1 : sn_cast(g, dx1, dt); /* the residual gradient, stored in dt */
    sn_node *dy2 = f32 ? sn_mul(g, h, sn_exp(g, x2)) : sn_cast(g, h, SN_F32);
    sn_node *dx2 = sn_layernorm_bwd(g, x2, w2, dy2, 1e-5f);
    sn_node *dw2 = sn_layernorm_bwd_w(g, x2, f32 ? dy2 : sn_cast(g, h, SN_F32), 1e-5f);
    sn_node *outs[] = {dx2, dw1, db1, dw2, sn_sum(g, f32 ? dy2 : sn_cast(g, h, SN_F32), 0, false)};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

/* Whether the outputs of g in v and in w (node buffers) hold the same bits; else names one. */
static void same_outputs(const sn_graph *g, void **v, void **w, const char *what) {
    for (int o = 0; o < g->n_outputs; o++) {
        const sn_node *x = g->outputs[o];
        ck_assert_msg(v[x->id] && w[x->id], "output %d was never written", o);
        ck_assert_msg(!memcmp(v[x->id], w[x->id], 4 * (size_t)sn_numel(x)),
                      "output %d (%s) differs from the separate kernels' bits %s", o,
                      sn_op_name(x->op), what);
    }
}

static void free_values(const sn_graph *g, void **v) {
    for (int i = 0; i < g->n_nodes; i++) free(v[i]);
    free(v);
}

START_TEST(cpu_joined_finish) {
    sn_graph *g = joined_finish_graph(_i ? SN_BF16 : SN_F32);
    sn_program *p = fuse(g);
    ck_assert_int_eq(p->n_kernels, 4); /* the pairs and their FINISH kernels */
    sn_interp *it = interp_run(g, 1, false);
    void **apart = calloc((size_t)g->n_nodes, sizeof *apart);
    program_on_host(p, it, apart);
    sn_err e;
    ck_assert_msg(sn_join_finish(p, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(p->n_kernels, 3); /* the last FINISH has no pair after it */
    const sn_kernel *host = p->kernels[1];
    ck_assert_msg(host->row.pair && host->tail && host->tail->stage == SN_SUM_FINISH &&
                  host->tail->scratch == p->kernels[0]->scratch, "the first FINISH did not join "
                  "the second pair");
    ck_assert_int_eq(p->kernels[2]->stage, SN_SUM_FINISH);
    sn_target t = sm(80);
    sn_cuda_dims d = sn_cuda_launch_dims(host, &t);
    ck_assert_int_eq(host->n_items, 25);
    ck_assert_int_eq(d.grid[0], 25 + 2); /* 320 columns in blocks of 256 */
    void **joined = calloc((size_t)g->n_nodes, sizeof *joined);
    program_on_host(p, it, joined);
    if (apart[g->outputs[0]->id] && joined[g->outputs[0]->id]) { /* (a build without the simulator runs nothing) */
        same_outputs(g, apart, joined, "when joined");
        static const struct { const char *what, *edits[5]; } bugs[2] = {
            {"the FINISH's blocks offset by one", {"(int)blockIdx.x - 25);", "(int)blockIdx.x - 24);"}},
            {"the host's last block sent to the FINISH", {"if (blockIdx.x >= 25) {",
             "if (blockIdx.x >= 24) {", "(int)blockIdx.x - 25);", "(int)blockIdx.x - 24);"}},
        };
        for (int b = 0; b < 2; b++) {
            void **bad = calloc((size_t)g->n_nodes, sizeof *bad);
            program_on_host_with(p, it, bad, bugs[b].edits);
            bool same = true;
            for (int o = 0; o < g->n_outputs; o++) {
                const sn_node *x = g->outputs[o];
                same = same && !memcmp(apart[x->id], bad[x->id], 4 * (size_t)sn_numel(x));
            }
            printf("test_cuda_rows: the joined FINISH with %s: %s\n", bugs[b].what, same ? "unnoticed" : "caught");
            ck_assert_msg(!same, "%s went unnoticed", bugs[b].what);
            free_values(g, bad);
        }
    }
    free_values(g, apart);
    free_values(g, joined);
    sn_interp_free(it);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Row kernels in 16-byte vectors: one graph holding, for each of f32, bf16 and f16 and each
 * row length of 64 (every pass 8 columns a step where a 16-bit buffer takes part, else 4: f32
 * as float4), 60 (4 a step where an f32 buffer takes part: f32 accesses float4, 16-bit ones a
 * value a lane; else one column a thread) and 30 (one column a thread), a layernorm with a fused prologue reading x in its dtype and an epilogue
 * casting to it, rmsnorm, a softmax and a causal mask in the dtype itself, cross-entropy over
 * fewer real classes than columns (the padded classes' gradient is 0), ignored targets
 * (class 3), and their backwards (the norm weight gradients and column sums in PARTIAL and
 * FINISH kernels). */
static const int64_t row_vector_C[3] = {64, 60, 30};
static const sn_dtype row_vector_dt[3] = {SN_F32, SN_BF16, SN_F16};

static sn_node *as_f32(sn_graph *g, sn_node *n) { return n->dtype == SN_F32 ? n : sn_cast(g, n, SN_F32); }
static sn_node *as_dt(sn_graph *g, sn_node *n, sn_dtype t) { return n->dtype == t ? n : sn_cast(g, n, t); }

static sn_graph *row_vector_graph(int lengths) { /* the first `lengths` of row_vector_C */
    enum { R = 24 };
    sn_graph *g = sn_graph_new();
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(R)), *loss = NULL;
    for (int c = 0; c < lengths; c++)
        for (int d = 0; d < 3; d++) {
            int64_t C = row_vector_C[c];
            sn_dtype dt = row_vector_dt[d];
            char name[32];
            snprintf(name, sizeof name, "x%lld_%s", (long long)C, sn_dtype_name(dt));
            sn_node *x = sn_input(g, name, dt, SN_SHAPE(R, C));
            sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
            sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
            sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
            sn_node *h = sn_layernorm(g, sn_add(g, as_f32(g, x), b), w, b, 1e-5f);
            sn_node *hd = as_dt(g, h, dt); /* stored in dt by the layernorm's epilogue */
            sn_node *r = sn_rmsnorm(g, sn_gelu(g, as_f32(g, hd)), v, 1e-5f);
            sn_node *sm = sn_softmax(g, as_dt(g, sn_scale(g, r, 0.5f), dt));
            sn_node *m = sn_causal_mask(g, sn_reshape(g, sm, SN_SHAPE(2, R / 2, C)));
            sn_node *logits = sn_add(g, sn_scale(g, as_f32(g, sn_reshape(g, m, SN_SHAPE(R, C))), 4.0f), h);
            sn_node *l = sn_cross_entropy_padded(g, logits, y, 3, C - 5);
            loss = loss ? sn_add(g, loss, l) : l;
        }
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* GPT-2's bf16 step keeps its rows in registers (cuda_row.h: sn_cu_row_cache_begin) where the
 * budgets say: on sm_90 the classifier, every layernorm and every norm backward pair; on sm_80
 * the pairs read their rows in every pass (their budget is none there); with the target's
 * row_cache off, nothing is kept. */
START_TEST(render_rows_kept) {
    /* as sinter train compiles it: the loss alone (the logits bf16) */
    sn_graph *g = gpt2_training_with("gpt2", 4, 256, SN_PRECISION_BF16, 0, true);
    sn_err e;
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_ROW, ks);
    static const struct { int arch; bool cache; } cases[3] = {{90, true}, {80, true}, {90, false}};
    for (int c = 0; c < 3; c++) {
        int norms = 0, norms_kept = 0, pairs = 0, pairs_kept = 0, classifier_kept = 0;
        for (int i = 0; i < n; i++) {
            sn_target t = sm(cases[c].arch);
            t.row_cache = cases[c].cache;
            sn_cuda_source cs;
            ck_assert_msg(sn_cuda_render(&ks[i], 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            bool kept = strstr(cs.src, "the row's values kept in registers") != NULL;
            sn_op op = ks[i]->anchor->op;
            if (op == SN_OP_LAYERNORM) norms++, norms_kept += kept;
            if (ks[i]->row.pair) pairs++, pairs_kept += kept;
            if (ks[i]->anchor2 && ks[i]->stage != SN_SUM_FINISH) classifier_kept += kept;
            sn_cuda_source_free(&cs);
        }
        printf("test_cuda_rows: gpt2 bf16 on sm_%d, row_cache %s: layernorms %d of %d kept, norm "
               "backward pairs %d of %d, the classifier %d\n", cases[c].arch,
               cases[c].cache ? "on" : "off", norms_kept, norms, pairs_kept, pairs, classifier_kept);
        ck_assert_int_eq(norms, 25);
        ck_assert_int_gt(pairs, 20);
        ck_assert_int_eq(norms_kept, (cases[c].cache ? norms : 0));
        ck_assert_int_eq(pairs_kept, (cases[c].cache && cases[c].arch == 90 ? pairs : 0));
        ck_assert_int_eq(classifier_kept, (cases[c].cache ? 1 : 0));
    }
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The rendered row kernels take the path their row length and dtypes call for. */
START_TEST(render_row_vectors) {
    sn_graph *g = row_vector_graph(3);
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_ROW, ks), seen[3][3] = {{0}};
    for (int i = 0; i < n; i++) {
        const sn_kernel *k = ks[i];
        sn_cuda_source cs = render(&k, 1);
        int64_t C = k->anchor->in[0]->shape[k->anchor->in[0]->rank - 1];
        bool half = false, f32 = false;
        int f32_streams = 0; /* full-size f32 buffers: four or more keep 4 lanes (cuda_row_pass.c) */
        for (int a = 0; a < k->n_out + k->n_in; a++) {
            half = half || sn_dtype_bits(k->args[a]->dtype) == 16;
            f32 = f32 || (k->args[a]->dtype == SN_F32 && sn_numel(k->args[a]) > 1);
            f32_streams += k->args[a]->dtype == SN_F32 &&
                           sn_numel(k->args[a]) >= sn_numel(k->anchor->in[0]);
        }
        const char *body = strstr(cs.src, "_v[l]"), *step = strstr(cs.src, "columns a step");
        if (k->stage == SN_SUM_FINISH || C == 30 || (C == 60 && !f32)) { /* nothing to vector */
            ck_assert_msg(!step && !body, "%s: vectors in\n%s", k->name, cs.src);
        } else {
            int lanes = half && C == 64 && f32_streams <= 3 ? 8 : 4;
            char want[32];
            snprintf(want, sizeof want, "/* %d columns a step */", lanes);
            ck_assert_msg(step && body && strstr(cs.src, want), "%s: no \"%s\" in\n%s", k->name,
                          want, cs.src);
            /* 16-bit vectors only in steps of 8; at 60 columns 16-bit values come a lane each */
            bool vec16 = false;
            for (int a = 0; a < k->n_out + k->n_in; a++) {
                char at[32];
                snprintf(at, sizeof at, a < k->n_out ? "sn_store8(&out%d[" : "sn_load8(&in%d[",
                         a < k->n_out ? a : a - k->n_out);
                vec16 = vec16 || (sn_dtype_bits(k->args[a]->dtype) == 16 && strstr(cs.src, at));
            }
            if (lanes == 4 || k->stage == SN_SUM_WHOLE)
                ck_assert_msg(vec16 == (lanes == 8), "%s: 16-bit vectors %sexpected in\n%s",
                              k->name, vec16 ? "not " : "", cs.src);
            seen[C == 64 ? 0 : 1][half ? 1 : 0]++;
        }
        if (i < 3 || strstr(k->name, "cross_entropy_bwd")) printf("test_cuda_rows: row vectors, %s:\n%s", k->name, cs.src);
        sn_cuda_source_free(&cs);
    }
    printf("test_cuda_rows: row vectors: %d row kernels; vector steps: C=64 %d f32-only, %d with 16-bit "
           "buffers; C=60 %d, %d\n", n, seen[0][0], seen[0][1], seen[1][0], seen[1][1]);
    ck_assert_msg(seen[0][0] >= 10 && seen[0][1] >= 10 && seen[1][0] >= 10 && seen[1][1] >= 5,
                  "vector steps: %d %d %d %d", seen[0][0], seen[0][1], seen[1][0], seen[1][1]);
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ... and each, run on the simulator, matches the interpreter (two thread orders). */
START_TEST(cpu_row_vectors) {
    sn_graph *g = row_vector_graph(3);
    int counts[SN_KER_KIND_COUNT] = {0};
    double t0 = now();
    int n = run_on_host(g, 25, false, 1e-5, counts); /* targets below the fewest classes */
    if (n) printf("test_cuda_rows: row vectors at C = 64, 60, 30 in f32, bf16, f16: %d kernels (%d row) "
                  "match the interpreter (%.2f s)\n", n, counts[SN_KER_ROW], now() - t0);
    ck_assert(!n || counts[SN_KER_ROW] >= 9 * 8);
    sn_graph_free(g);
}
END_TEST

/* Replaces every `from` in src with `to` (malloc'd); *count gets how many. */
static char *replace_all(const char *src, const char *from, const char *to, int *count) {
    size_t lf = strlen(from), lt = strlen(to), n = 0;
    for (const char *at = strstr(src, from); at; at = strstr(at + lf, from)) n++;
    char *out = malloc(strlen(src) + n * lt + 1), *o = out;
    ck_assert(out);
    for (const char *at; (at = strstr(src, from)); src = at + lf) {
        memcpy(o, src, (size_t)(at - src));
        o += at - src;
        memcpy(o, to, lt);
        o += lt;
    }
    strcpy(o, src);
    *count = (int)n;
    return out;
}

/* Row kernel k of g rendered, run on the CPU against the interpreter (targets below `vocab`):
 * as generated within 8e-3, then with each edits[2i] replaced by edits[2i + 1] (each found at
 * least once) beyond it: a planted bug, `what`, caught. */
static void row_bug_caught(sn_graph *g, const sn_kernel *k, bool row_cache, int vocab,
                           const char *const *edits, int n_edits, const char *label, const char *what) {
    sn_cuda_source cs = render_cached(&k, 1, row_cache);
    sn_interp *it = interp_run(g, vocab, false);
    for (int bug = 0; bug < 2; bug++) {
        char *src = strdup(cs.src);
        for (int i = 0; bug && i < n_edits; i++) {
            int n;
            char *next = replace_all(src, edits[2 * i], edits[2 * i + 1], &n);
            ck_assert_msg(n >= 1, "%s: no \"%s\" in its source", k->name, edits[2 * i]);
            free(src);
            src = next;
        }
        sn_sim_module *h = host_compile(src);
        if (h) {
            double err = host_check(h, k, cs.fn[0], it, 1e-5, true);
            printf("test_cuda_rows: %s, %s: error %.3g\n", label, bug ? what : "as generated", err);
            if (bug) ck_assert_msg(!(err <= 8e-3), "%s went unnoticed (%g)", what, err);
            else ck_assert_double_le(err, 8e-3);
            sn_sim_module_free(h);
        }
        free(src);
    }
    sn_interp_free(it);
    sn_cuda_source_free(&cs);
}

/* The lane loop reading lane 0 of every vector (a generator bug, planted in the rendered text)
 * fails the comparison: the vector test can fail. */
START_TEST(cpu_row_vector_lane_bug_caught) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_BF16, SN_SHAPE(24, 64));
    sn_graph_add_output(g, sn_softmax(g, x));
    sn_program *p = fuse(g);
    const sn_kernel *ks[4];
    ck_assert_int_eq(kernels_of(p, SN_KER_ROW, ks), 1);
    static const char *const lane0[] = {"_v[l]", "_v[0]"};
    row_bug_caught(g, ks[0], false, 1, lane0, 1, "bf16 softmax over rows of 64",
                   "every lane reading lane 0");
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier's graph: R rows of C logits rounded to bf16 of which V are real classes,
 * targets below the vocabulary given to the interpreter, class 3 ignored; *k its PARTIAL
 * kernel. The logits: an f32 product rounded to bf16 in the classifier's prologue (bf16
 * false), or the product as autocast makes it in a bf16 program (true: GPT-2's bf16 step). */
static sn_program *classifier_graph(int64_t R, int64_t C, int64_t V, bool bf16, sn_graph **out,
                                    const sn_kernel **k) {
    enum { K = 16 };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, K));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(R));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(K, C), SN_INIT_NORMAL, 1);
    sn_node *mm = sn_matmul(g, x, w);
    sn_node *loss = sn_cross_entropy_padded(g, bf16 ? mm : sn_cast(g, sn_cast(g, mm, SN_BF16), SN_F32),
                                            y, 3, V);
    sn_err e;
    if (bf16) { /* autocast, then the backward */
        sn_graph_set_loss(g, loss);
        sn_pipeline_opts o = sn_pipeline_defaults();
        o.backward = true;
        o.precision = SN_PRECISION_BF16;
        ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    } else {
        ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    }
    sn_program *p = fuse(g);
    *k = NULL;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ROW && p->kernels[i]->anchor2 &&
            p->kernels[i]->stage != SN_SUM_FINISH)
            *k = p->kernels[i];
    ck_assert_msg(*k, "no classifier kernel");
    *out = g;
    return p;
}

/* The classifier (kernel.h anchor2: cross-entropy's loss and its gradient in one kernel) over
 * rows of 64 logits of which 59 are real classes (f32: 4 columns a step, every row's last
 * vector cut at column 59), ignored targets (class 3), the row read from memory in every pass
 * (sn_target row_cache off): its online max and sum, a vector at a time (cuda_row.c), give the
 * interpreter's gradient in both thread orders; the cut vector counted whole (planted: the
 * columns past 59 summed) is caught, and so is a wrong count of the rows (the targets read 4
 * at a time). */
START_TEST(cpu_classifier_vectors) {
    sn_graph *g;
    const sn_kernel *k;
    sn_program *p = classifier_graph(24, 64, 59, false, &g, &k);
    sn_cuda_source cs = render_cached(&k, 1, false);
    bool vectors = strstr(cs.src, "/* 4 columns a step */") && strstr(cs.src, "xs[l] =");
    if (!vectors) printf("%s\n", cs.src), fflush(stdout);
    ck_assert_msg(vectors, "the classifier %s is not read a vector at a time", k->name);
    sn_cuda_source_free(&cs);
    static const char *const whole[] = {"if (l < nv) se +=", "se +=", "if (j >= 59) break;", ";"};
    row_bug_caught(g, k, false, 25, whole, 2, "the classifier over rows of 64 logits, 59 classes",
                   "the cut vector summed whole"); /* targets below 25: some the ignored 3 */
    static const char *const count[] = {"counted += ((int)v.x", "counted += 1.0f + ((int)v.x"};
    row_bug_caught(g, k, false, 25, count, 1, "the classifier over rows of 64 logits, 59 classes",
                   "the targets counted one too many a vector");
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier keeping its row in registers (cuda_row_pass.c: sn_cu_row_cache_begin) over
 * rows of 12,288 logits (8 columns a step, 1,024 threads: two steps, the second half the
 * threads') of which 12,283 are real classes (the last vector cut): the logits kept two bf16 to a register,
 * read once, give the interpreter's loss and gradient in both thread orders; planted bugs in
 * the kept registers are caught: every step reading the first step's, the two halves of a
 * word swapped, the last step left out, the max over the first step's pairs (taken two at a
 * time on the kept words) started at +inf. */
START_TEST(cpu_classifier_kept) {
    sn_graph *g;
    const sn_kernel *k;
    sn_program *p = classifier_graph(5, 12288, 12283, true, &g, &k);
    sn_cuda_source cs = render(&k, 1);
    bool kept = strstr(cs.src, "unsigned rc0[8] = {0}; /* ") && strstr(cs.src, "cs < 2;") &&
                strstr(cs.src, "if (cs < 1 || j0 < 12283) {") && !strstr(cs.src, "xs[l] =") &&
                strstr(cs.src, "for (int u = 0; u < 4; u++) m2 = sn_bf16x2_max(m2, rc0[u]);");
    if (!kept) printf("%s\n", cs.src), fflush(stdout);
    ck_assert_msg(kept, "the classifier %s does not keep its row in two steps", k->name);
    sn_cuda_source_free(&cs);
    static const struct { const char *from, *to, *what; } bugs[4] = {
        {"rc0[cs * 4 + l / 2] & 0xffff0000u : rc0[cs * 4 + l / 2] << 16",
         "rc0[l / 2] & 0xffff0000u : rc0[l / 2] << 16", "every step reading the first step's"},
        {"l % 2 ? rc0", "l % 2 == 0 ? rc0", "the two halves of a word swapped"},
        {"cs < 2;", "cs < 1;", "the last step left out"},
        /* the max over the pairs (sn_cu_row_cache_max) from +inf: a max too high; one too low
           changes nothing but the roundings (the softmax does not move with it) */
        {"m2 = 0xff80ff80u;", "m2 = 0x7f807f80u;", "the pairs' max started at +inf"},
    };
    for (int b = 0; b < 4; b++) {
        const char *const edit[2] = {bugs[b].from, bugs[b].to};
        row_bug_caught(g, k, true, 40, edit, 1, "the classifier over rows of 12288 kept", bugs[b].what);
    }
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier taking its rows in turn (cuda_row.h: sn_cu_row_prefetch_plan; sm_80 and up):
 * the next row's bf16 logits copied into shared memory with cp.async while the block works on
 * this one. 7 rows of 12,288 (two steps of 1,024 threads) by the grid of two SMs, a block each
 * (rows 0, 2, 4, 6 and 1, 3, 5), their targets set: ignored rows (class 3) between counted
 * ones in a block's turn, the last real class: the interpreter's gradient in both thread
 * orders; planted bugs
 * caught: the copy of the row after this one instead of the block's next, no wait for the
 * copy, a word of each step taken from the wrong part of the vector, the target's column not
 * written again by its owner (the pass writes p there, not p - scale). sm_75 (no cp.async)
 * reads its rows as before. */
START_TEST(cpu_classifier_prefetched) {
    sn_graph *g;
    const sn_kernel *k;
    sn_program *p = classifier_graph(7, 12288, 12283, true, &g, &k);
    sn_target t = sm(80), t75 = sm(75);
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).shared_bytes, 2 * 12288);
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).grid[0], 7); /* the SMs unknown: a block a row */
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t75).shared_bytes, 0);
    t.sm_count = 2; /* a block an SM at 1024 threads (their registers) */
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).grid[0], 2);
    t.sm_count = 132;
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).grid[0], 7);
    sn_cuda_source cs = render(&k, 1);
    bool turn = strstr(cs.src, "r += gridDim.x) {") &&
                strstr(cs.src, "sn_cp_async_16(&next_row[j0 / 8], src + j0);");
    if (!turn) printf("%s\n", cs.src), fflush(stdout);
    ck_assert_msg(turn, "the classifier %s does not take its rows in turn", k->name);
    sn_cuda_source_free(&cs);
    static const struct { const char *from, *to, *what; } bugs[4] = {
        {"(r + gridDim.x) *", "(r + 1) *", "the copy of the row after this one"},
        {"sn_cp_async_wait_all();", ";", "no wait for the copy"},
        {"rc0[cs * 4 + 1] = v.y;", "rc0[cs * 4 + 1] = v.z;", "a word from the wrong part of the vector"},
        {"% 1024 == threadIdx.x) {", "% 1024 == threadIdx.x + 1) {", "the target's column not written again"},
    };
    static const int32_t targets[7] = {5, 3, 12282, 3, 0, 12282, 3}; /* 3: ignored */
    host_sm_count = 2;
    fixed_i32 = targets;
    for (int b = 0; b < 4; b++) {
        const char *const edit[2] = {bugs[b].from, bugs[b].to};
        row_bug_caught(g, k, true, 40, edit, 1, "the classifier over rows of 12288 in turn", bugs[b].what);
    }
    fixed_i32 = NULL;
    host_sm_count = 0;
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier at the vocabularies of the models sinter knows (GPT-2's 50,257 padded to
 * 50,304, SmolLM2's 49,152, TinyLlama's 32,000; LLaMA 3's 128,256 and Qwen2.5's 151,936, too
 * long to keep) through NVRTC for sm_80 and sm_90: no spills. Its 1024 threads leave 64
 * registers a thread; where the row is kept in them, how ptxas schedules the unrolled steps
 * decided it (2026-11-29: 12 bytes spilled at 49,152 before the gradient's scale went into
 * the exponent). */
START_TEST(nvrtc_classifier_vocabularies) {
    if (!have_nvrtc()) return;
    static const int64_t vocab[][2] = {{50304, 50257}, {49152, 49152}, {32000, 32000},
                                       {128256, 128256}, {151936, 151936}};
    for (size_t v = 0; v < sizeof vocab / sizeof vocab[0]; v++) {
        sn_graph *g;
        const sn_kernel *k;
        sn_program *p = classifier_graph(4, vocab[v][0], vocab[v][1], true, &g, &k);
        static const int arch[] = {80, 86, 89, 90, 100, 120}; /* the RTX 30, 40, 50, a B200 */
        for (int ai = 0; ai < 6; ai++) {
            int a = arch[ai];
            sn_target t = sm(a);
            sn_cuda_source cs;
            sn_cuda_module m;
            sn_err e;
            ck_assert_msg(sn_cuda_render(&k, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            ck_assert_msg(sn_nvrtc_compile(cs.src, "classifier", a, &m, &e) == SN_OK, "%s", e.msg);
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[0]);
            ck_assert(in);
            printf("test_cuda_rows: classifier over %lld classes (%lld columns), sm_%d: %d registers, "
                   "%s%s, spills %d/%d\n", (long long)vocab[v][1], (long long)vocab[v][0], a,
                   in->registers, strstr(cs.src, "unsigned rc0[") ? "kept" : "not kept",
                   strstr(cs.src, "next_row") ? ", rows in turn" : "", in->spill_store_bytes,
                   in->spill_load_bytes);
            ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 && in->stack_bytes == 0,
                          "the classifier over %lld columns spills on sm_%d", (long long)vocab[v][0], a);
            /* its static and dynamic shared memory within what a block may opt into there (the
               rows in turn copy a row of 2 C bytes ahead: 100,608 of the 101,376 of sm_86/89) */
            sn_cuda_dims d = sn_cuda_launch_dims(k, &t);
            ck_assert_msg(in->shared_bytes + (int64_t)d.shared_bytes <= t.shared_max,
                          "the classifier over %lld columns takes %d + %u bytes of shared memory on "
                          "sm_%d, over %lld", (long long)vocab[v][0], in->shared_bytes, d.shared_bytes,
                          a, (long long)t.shared_max);
            sn_cuda_module_free(&m);
            sn_cuda_source_free(&cs);
        }
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* Column reductions over few rows take a thread a column (cuda_reduce.c: d <= 32, its rows'
 * loads together, added in order): a sum over 16 rows of (3, 16, 300) (300 columns: a block
 * and a short one each of 3 outer indices), a max over 5 and a mean over 20, each against the
 * interpreter in both thread orders; the rows summed from the second (planted) is caught; a
 * sum over 40 rows keeps the tiles. */
START_TEST(cpu_reduce_by_column) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 16, 300));
    sn_node *m = sn_input(g, "m", SN_F32, SN_SHAPE(5, 37));
    sn_node *v = sn_input(g, "v", SN_F32, SN_SHAPE(20, 2, 150));
    sn_node *l = sn_input(g, "l", SN_F32, SN_SHAPE(40, 77));
    sn_graph_add_output(g, sn_sum(g, x, 1, false));
    sn_graph_add_output(g, sn_max(g, m, 0, false));
    sn_graph_add_output(g, sn_mean(g, v, 0, false));
    sn_graph_add_output(g, sn_sum(g, l, 0, false));
    sn_program *p = fuse(g);
    const sn_kernel *ks[8];
    int n = kernels_of(p, SN_KER_REDUCE, ks), by_column = 0;
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < n; i++) {
        sn_cuda_source cs = render(&ks[i], 1);
        by_column += strstr(cs.src, "the rows' loads issued together, added in order") != NULL;
        sn_cuda_source_free(&cs);
    }
    ck_assert_int_eq(by_column, 3);
    sn_program_free(p);
    int counts[SN_KER_KIND_COUNT] = {0};
    int ran = run_on_host(g, 1, false, 1e-6, counts);
    if (ran) printf("test_cuda_rows: column reductions: %d kernels match\n", ran);
    p = fuse(g);
    kernels_of(p, SN_KER_REDUCE, ks);
    static const char *const second[] = {"for (int i = 0; i < 16; i++)", "for (int i = 1; i < 16; i++)"};
    row_bug_caught(g, ks[0], true, 1, second, 1, "a sum over 16 rows a thread a column",
                   "the rows summed from the second");
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* row_vector_graph's kernels at 64 and 60 columns through NVRTC for sm_75, 80 and 90 (one
 * arch a test: about 80 functions each): no spills. The gpt2 programs of test_cuda.c take the same
 * paths at full size (rows of 768: f32 4 a step, 16-bit 8; the 50304 padded classes). */
START_TEST(nvrtc_row_vectors) {
    static const int arch[3] = {75, 80, 90};
    if (have_nvrtc()) nvrtc_program(row_vector_graph(2), "row-vectors", 24, 0, &arch[_i], 1);
}
END_TEST

/* A barrier deleted from the block sum (by editing the rendered text, as a generator bug would
 * leave it) makes the layernorm kernel over rows of 1100 (a block per row: longer than a warp
 * takes) fail the comparison: each of the two. */
START_TEST(cpu_deleted_barrier_caught) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(24, 1100));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(1100), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(1100), SN_INIT_NORMAL, 1);
    sn_graph_add_output(g, sn_layernorm(g, x, w, b, 1e-5f));
    sn_program *p = fuse(g);
    const sn_kernel *ks[4];
    ck_assert_int_eq(kernels_of(p, SN_KER_ROW, ks), 1);
    sn_cuda_source cs = render(ks, 1);
    sn_interp *it = interp_run(g, 1, false);
    const char *at[2] = {"v = sn_warp_sum(v);\n    __syncthreads();\n",
                         "partial_sum[warp] = v;\n    __syncthreads();\n"};
    sn_sim_module *h = host_compile(cs.src);
    if (h) { /* the intact text passes */
        ck_assert_double_le(host_check(h, ks[0], cs.fn[0], it, 1e-5, true), 1e-5);
        sn_sim_module_free(h);
    }
    for (int i = 0; i < 2; i++) {
        char *bad = strdup(cs.src), *cut = strstr(bad, at[i]);
        ck_assert_msg(cut, "no \"%s\" in\n%s", at[i], cs.src);
        cut = strstr(cut, "__syncthreads();");
        memmove(cut, cut + strlen("__syncthreads();"), strlen(cut + strlen("__syncthreads();")) + 1);
        h = host_compile(bad);
        if (h) {
            double err = host_check(h, ks[0], cs.fn[0], it, 1e-5, true);
            printf("test_cuda_rows: barrier %d of sn_block_sum deleted: layernorm error %.3g "
                   "(caught)\n", i + 1, err);
            ck_assert_msg(!(err <= 1e-5), "a deleted barrier went unnoticed (error %g)", err);
            sn_sim_module_free(h);
        }
        free(bad);
    }
    sn_interp_free(it);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuda_rows");
    TCase *tc = tcase_create("rendered");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, render_row_vectors);
    tcase_add_test(tc, render_rows_kept);
    tcase_add_test(tc, sum_chunk_rule);
    suite_add_tcase(s, tc);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 120);
    tcase_add_loop_test(nv, nvrtc_row_vectors, 0, 3);
    tcase_add_test(nv, nvrtc_classifier_vocabularies);
    suite_add_tcase(s, nv);
    TCase *cpu = tcase_create("cpu");
    tcase_set_timeout(cpu, 120);
    tcase_add_test(cpu, cpu_row_ops_several_warps);
    tcase_add_test(cpu, cpu_row_ops_warp_per_row);
    tcase_add_test(cpu, cpu_chunked_weight_gradient);
    tcase_add_test(cpu, cpu_deleted_barrier_caught);
    tcase_add_loop_test(cpu, cpu_norm_pair, 0, 8);
    tcase_add_loop_test(cpu, cpu_joined_finish, 0, 2);
    tcase_add_test(cpu, cpu_row_vectors);
    tcase_add_test(cpu, cpu_classifier_vectors);
    tcase_add_test(cpu, cpu_classifier_kept);
    tcase_add_test(cpu, cpu_classifier_prefetched);
    tcase_add_test(cpu, cpu_reduce_by_column);
    tcase_add_test(cpu, cpu_row_vector_lane_bug_caught);
    suite_add_tcase(s, cpu);
    return sn_test_main(s);
}
