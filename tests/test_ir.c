/* tests/test_ir.c: the IR's text form (print, parse, round trip), the verifier and the shape-rule
 * messages. Graphs are built with sn_graph_append on hand-made protos; errors are checked by text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"

/* ---- building graphs from protos ---- */

static sn_node *app(sn_graph *g, const sn_node *proto) {
    sn_node *n = sn_graph_append(g, proto);
    ck_assert_msg(n, "building the test graph: %s", sn_graph_error(g));
    return n;
}

#define NODE(g, OP, ...) app(g, &(sn_node){.op = SN_OP_##OP, __VA_ARGS__})
#define IN(...)                                                                                    \
    .in = (sn_node *[]){__VA_ARGS__},                                                              \
    .n_in = (int)(sizeof((sn_node *[]){__VA_ARGS__}) / sizeof(sn_node *))
#define T(DT, ...)                                                                                 \
    .dtype = SN_##DT, .rank = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),           \
    .shape = {__VA_ARGS__}
#define SCALAR(DT) .dtype = SN_##DT, .rank = 0

#define ck_assert_has(msg, sub)                                                                    \
    ck_assert_msg(strstr((msg), (sub)), "message\n  \"%s\"\nlacks\n  \"%s\"", (msg), (sub))

static const float const_data[] = {1, 2.5f, -INFINITY, INFINITY, NAN, 0.1f, 10.0000105f, -0.0f};

/* A graph using every op of the table, with a backward part, grads, outputs and a loss.
 * (B, T, C, V) = (2, 3, 8, 10). */
static sn_graph *build_all_ops(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = NODE(g, INPUT, .name = "x", T(F32, 2, 3, 8));
    sn_node *ids = NODE(g, INPUT, .name = "ids \"q\" \\ \n#\x01", .role = SN_ROLE_TOKENS, T(I32, 2, 3));
    sn_node *tg = NODE(g, INPUT, .name = "targets", .role = SN_ROLE_TARGETS, T(I32, 2, 3));
    sn_node *wte = NODE(g, PARAM, .name = "wte", .a = {.init = SN_INIT_NORMAL, .f = 0.02f},
                        T(F32, 10, 8));
    sn_node *lw = NODE(g, PARAM, .name = "ln.w", .a = {.init = SN_INIT_ONES}, T(F32, 8));
    sn_node *lb = NODE(g, PARAM, .name = "ln.b", T(F32, 8));
    sn_node *c = NODE(g, CONST, .data = (float *)const_data, T(F32, 8));
    sn_node *half = NODE(g, FULL, .a = {.f = 0.5f}, SCALAR(F32));
    sn_node *e = NODE(g, EMBEDDING, IN(wte, ids));
    sn_node *h = NODE(g, ADD, IN(x, e));
    h = NODE(g, SUB, IN(h, c));
    h = NODE(g, MUL, IN(h, half));
    h = NODE(g, DIV, IN(h, lw));
    NODE(g, EQ, IN(ids, tg));
    h = NODE(g, NEG, IN(h));
    h = NODE(g, SCALE, IN(h), .a = {.f = 0.125f});
    h = NODE(g, EXP, IN(h));
    h = NODE(g, LOG, IN(h));
    h = NODE(g, TANH, IN(h));
    h = NODE(g, SQRT, IN(h));
    h = NODE(g, RSQRT, IN(h));
    h = NODE(g, GELU, IN(h));
    h = NODE(g, SILU, IN(h));
    h = NODE(g, GELU_BWD, IN(x, h));
    h = NODE(g, SILU_BWD, IN(x, h));
    sn_node *seed = NODE(g, INPUT, .name = "seed", .role = SN_ROLE_DROPOUT_SEED, SCALAR(F32));
    h = NODE(g, DROPOUT, IN(h, seed), .a = {.f = 0.25f, .site = 3});
    sn_node *hb = NODE(g, CAST, IN(h), T(BF16, 2, 3, 8));
    NODE(g, SUM, IN(hb), .a = {.axis = 2, .keepdim = 1});
    NODE(g, MEAN, IN(h), .a = {.axis = 1});
    NODE(g, MAX, IN(h), .a = {.axis = 0});
    sn_node *ln = NODE(g, LAYERNORM, IN(h, lw, lb), .a = {.f = 1e-5f});
    sn_node *rn = NODE(g, RMSNORM, IN(ln, lw), .a = {.f = 1e-6f});
    sn_node *att = NODE(g, MATMUL, IN(rn, x), .a = {.tb = 1});
    sn_node *mask = NODE(g, CAUSAL_MASK, IN(att), .a = {.f = -INFINITY});
    sn_node *sm = NODE(g, SOFTMAX, IN(mask));
    sn_node *y = NODE(g, MATMUL, IN(sm, x));
    NODE(g, RESHAPE, IN(y), T(F32, 6, 8));
    NODE(g, PERMUTE, IN(y), .a = {.perm = {0, 2, 1}});
    sn_node *bc = NODE(g, BROADCAST, IN(lw), T(F32, 2, 3, 8));
    sn_node *sl = NODE(g, SLICE, IN(bc), .a = {.axis = 2, .start = 2, .end = 5});
    sn_node *pd = NODE(g, PAD, IN(sl), .a = {.axis = 2, .start = 2, .end = 8});
    sn_node *cc = NODE(g, CONCAT, IN(y, pd, bc), .a = {.axis = 1});
    sn_node *logits = NODE(g, MATMUL, IN(y, wte), .a = {.tb = 1});
    sn_node *loss = NODE(g, CROSS_ENTROPY, IN(logits, tg), .a = {.end = 9, .ignore_index = -1});
    sn_node *lse = NODE(g, ATTENTION_LSE, IN(x, y), .a = {.f = 0.353553391f});
    sn_node *o = NODE(g, ATTENTION, IN(x, y, y, lse), .a = {.f = 0.353553391f});

    g->n_forward = g->n_nodes;
    g->has_backward = true;
    sn_node *dl = NODE(g, FULL, .a = {.f = 1}, SCALAR(F32));
    sn_node *dlogits = NODE(g, CROSS_ENTROPY_BWD, IN(logits, tg, dl), .a = {.end = 9, .ignore_index = -1});
    sn_node *dy = NODE(g, MATMUL, IN(dlogits, wte));
    NODE(g, SOFTMAX_BWD, IN(sm, sm));
    NODE(g, LAYERNORM_BWD, IN(h, lw, dy), .a = {.f = 1e-5f});
    sn_node *dlw = NODE(g, LAYERNORM_BWD_W, IN(h, dy), .a = {.f = 1e-5f});
    NODE(g, RMSNORM_BWD, IN(ln, lw, dy), .a = {.f = 1e-6f});
    sn_node *dlb = NODE(g, RMSNORM_BWD_W, IN(ln, dy), .a = {.f = 1e-6f});
    sn_node *dwte = NODE(g, EMBEDDING_BWD, IN(ids, dy), T(F32, 10, 8));
    NODE(g, ATTENTION_BWD_Q, IN(x, y, y, o, dy, lse), .a = {.f = 0.353553391f});
    NODE(g, ATTENTION_BWD_K, IN(x, y, y, o, dy, lse), .a = {.f = 0.353553391f});
    NODE(g, ATTENTION_BWD_V, IN(x, y, y, o, dy, lse), .a = {.f = 0.353553391f});
    /* NF4 storage of 3 x 40 weights: 4 + 4 + 2 blocks + 60 bytes of codes (ir/nf4.h) */
    sn_node *q = NODE(g, PARAM, .name = "w.nf4", .a = {.init = SN_INIT_ZEROS, .frozen = 1}, T(U8, 70));
    NODE(g, DEQUANT_NF4, IN(q), T(BF16, 3, 40));
    sn_node *q4 = NODE(g, RESHAPE, IN(x), T(F32, 2, 3, 1, 8)); /* decoding (no gradient; last, so no id above moves): 3 heads, 1 token */
    sn_node *kv4 = NODE(g, RESHAPE, IN(y), T(F32, 2, 1, 3, 8)); /* a cache of 3 */
    sn_node *m4 = NODE(g, INPUT, .name = "mask", .role = SN_ROLE_MASK, T(F32, 2, 1, 1, 3));
    sn_node *kn = NODE(g, SLICE, IN(kv4), .a = {.axis = 2, .start = 0, .end = 1});
    NODE(g, ATTENTION_CACHE, IN(q4, kv4, kv4, m4, kn, kn), .a = {.f = 0.353553391f});
    wte->grad = dwte;
    lw->grad = dlw;
    lb->grad = dlb;
    g->loss = loss;
    sn_node *outs[] = {logits, loss, cc, dwte, dlw, dlb};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) sn_graph_add_output(g, outs[i]);
    /* the fp8 pass's scale and 8-bit products (last, so no id above moves) */
    sn_node *am = NODE(g, AMAX, IN(h), .a = {.axis = 2, .keepdim = 1});
    sn_node *s8 = NODE(g, POW2_SCALE, IN(am), .a = {.f = 448});
    sn_node *h8 = NODE(g, CAST, IN(NODE(g, MUL, IN(h, s8))), T(F8E4M3, 2, 3, 8));
    sn_node *x8 = NODE(g, CAST, IN(x), T(F8E5M2, 2, 3, 8));
    NODE(g, MATMUL, IN(h8, x8), .a = {.tb = 1});
    return g;
}

static bool same_float(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* a and b must have equal nodes, grads, outputs, loss and backward marker. */
static void check_same_graph(const sn_graph *a, const sn_graph *b) {
    ck_assert_int_eq(a->n_nodes, b->n_nodes);
    ck_assert_int_eq(a->n_forward, b->n_forward);
    ck_assert_int_eq(a->has_backward, b->has_backward);
    ck_assert_int_eq(a->n_outputs, b->n_outputs);
    for (int i = 0; i < a->n_outputs; i++) ck_assert_int_eq(a->outputs[i]->id, b->outputs[i]->id);
    ck_assert_int_eq(a->loss ? a->loss->id : -1, b->loss ? b->loss->id : -1);
    for (int i = 0; i < a->n_nodes; i++) {
        const sn_node *x = a->nodes[i], *y = b->nodes[i];
        ck_assert_int_eq(y->id, i);
        ck_assert_msg(x->op == y->op && x->dtype == y->dtype && x->rank == y->rank,
                      "node %d: op/dtype/rank differ", i);
        for (int k = 0; k < x->rank; k++) ck_assert_int_eq(x->shape[k], y->shape[k]);
        ck_assert_int_eq(x->n_in, y->n_in);
        for (int k = 0; k < x->n_in; k++) ck_assert_int_eq(x->in[k]->id, y->in[k]->id);
        const sn_attrs *p = &x->a, *q = &y->a;
        ck_assert_msg(same_float(p->f, q->f), "node %d: f %.9g vs %.9g", i, p->f, q->f);
        ck_assert_msg(p->axis == q->axis && p->keepdim == q->keepdim && p->ta == q->ta &&
                      p->tb == q->tb && p->start == q->start && p->end == q->end &&
                      p->ignore_index == q->ignore_index && p->init == q->init &&
                      !memcmp(p->perm, q->perm, sizeof p->perm), "node %d: attributes differ", i);
        ck_assert_msg((x->name == NULL) == (y->name == NULL), "node %d: name presence differs", i);
        if (x->name) ck_assert_str_eq(x->name, y->name);
        ck_assert_msg(x->role == y->role, "node %d: role %d vs %d", i, (int)x->role, (int)y->role);
        ck_assert_msg((x->data == NULL) == (y->data == NULL), "node %d: data presence differs", i);
        for (int64_t k = 0; x->data && k < sn_numel(x); k++)
            ck_assert_msg(same_float(x->data[k], y->data[k]), "node %d data[%lld]: %.9g vs %.9g", i,
                          (long long)k, x->data[k], y->data[k]);
        ck_assert_int_eq(x->grad ? x->grad->id : -1, y->grad ? y->grad->id : -1);
    }
}

static sn_graph *parse_ok(const char *text) {
    sn_graph *g = NULL;
    sn_err e = {0};
    sn_status st = sn_graph_parse(text, &g, &e);
    ck_assert_msg(st == SN_OK && g, "parse failed: %s\n--- text:\n%s", e.msg, text);
    return g;
}

/* ---- text form ---- */

START_TEST(test_roundtrip_all_ops) {
    sn_graph *g = build_all_ops();
    int count[SN_OP_COUNT] = {0};
    for (int i = 0; i < g->n_nodes; i++) count[g->nodes[i]->op]++;
    for (int op = 0; op < SN_OP_COUNT; op++)
        ck_assert_msg(count[op] > 0, "op %s is missing from the round-trip graph: add it",
                      sn_op_name(op));
    sn_err e = {0};
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "verify: %s", e.msg);

    char *s1 = sn_graph_to_string(g);
    ck_assert_has(s1, "  %1 = input \"ids \\\"q\\\" \\\\ \\n#\\x01\" role=tokens : i32[2,3]\n");
    ck_assert_has(s1, "  %2 = input \"targets\" role=targets : i32[2,3]\n");
    ck_assert_has(s1, "  %3 = param \"wte\" init=normal f=0.02 : f32[10,8]\n");
    ck_assert_has(s1, "  %6 = const data=[1, 2.5, -inf, inf, nan, 0.1, 10.0000105, -0] : f32[8]\n");
    ck_assert_has(s1, "  %25 = input \"seed\" role=dropout_seed : f32[]\n");
    ck_assert_has(s1, "  %26 = dropout %24, %25 f=0.25 site=3 : f32[2,3,8]\n");
    ck_assert_has(s1, " = causal_mask %33 f=-inf : f32[2,3,3]\n");
    ck_assert_has(s1, " = permute %36 perm=[0,2,1] : f32[2,8,3]\n");
    ck_assert_has(s1, " = attention %0, %36, %36, %45 f=0.35355338 : f32[2,3,8]\n");
    ck_assert_has(s1, " = sum %27 axis=2 keepdim=1 : bf16[2,3,1]\n");
    ck_assert_has(s1, "%44 = cross_entropy %43, %2 start=0 end=9 ignore_index=-1 : f32[]\n");
    ck_assert_has(s1, ": f32[2,3,8]\n  backward\n  %47 = full f=1 : f32[]\n");
    ck_assert_has(s1, "  output %43\n  output %44\n  output %42\n");
    ck_assert_has(s1, "  loss %44\n  grad %3 = %55\n  grad %4 = %52\n  grad %5 = %54\n}\n");

    sn_graph *g2 = parse_ok(s1);
    check_same_graph(g, g2);
    ck_assert_msg(sn_verify(g2, &e) == SN_OK, "verify of the parsed graph: %s", e.msg);
    char *s2 = sn_graph_to_string(g2);
    ck_assert_str_eq(s1, s2);
    free(s1);
    free(s2);
    sn_graph_free(g);
    sn_graph_free(g2);
}
END_TEST

START_TEST(test_print_golden) {
    sn_graph *g = sn_graph_new();
    sn_node *idx = NODE(g, INPUT, .name = "idx", T(I32, 4, 64));
    sn_node *wte = NODE(g, PARAM, .name = "wte", .a = {.init = SN_INIT_NORMAL, .f = 0.02f},
                        T(F32, 50257, 768));
    sn_node *x = NODE(g, EMBEDDING, IN(wte, idx));
    sn_node *lg = NODE(g, MATMUL, IN(x, wte), .a = {.tb = 1});
    NODE(g, CONST, .data = (float[]){1, 2.5f, -INFINITY}, T(F32, 3));
    sn_graph_add_output(g, lg);
    char *s = sn_graph_to_string(g);
    ck_assert_str_eq(s, "graph {\n"
                        "  %0 = input \"idx\" : i32[4,64]\n"
                        "  %1 = param \"wte\" init=normal f=0.02 : f32[50257,768]\n"
                        "  %2 = embedding %1, %0 : f32[4,64,768]\n"
                        "  %3 = matmul %2, %1 ta=0 tb=1 : f32[4,64,50257]\n"
                        "  %4 = const data=[1, 2.5, -inf] : f32[3]\n"
                        "  output %3\n"
                        "}\n");
    free(s);
    sn_graph_free(g);
}
END_TEST

/* Hand-written text (comments, blank lines, loose spacing, attributes out of order or omitted)
 * prints in canonical form. */
START_TEST(test_parse_canonical) {
    const char *in = "# a hand-written graph\n"
                     "\n"
                     "graph {   # opens\n"
                     "  %0 = input \"a\":f32[4, 8]\n"
                     "  %1=param \"w\" f=0.5 init=normal : f32[3,8]   # trailing comment\n"
                     "\n"
                     "  %2 = matmul %0,%1 tb=1 : f32[4,3]\n"
                     "  %3 = sum %2 : f32[3]\n"
                     "  %4 = sum %3 axis=0 : f32[]\n"
                     "  %5 = full f=1e-3 : f32[]\n"
                     "  backward\n"
                     "  %6 = full : f32[3,8]\n"
                     "  loss %4\n"
                     "  grad %1 = %6\n"
                     "  output %4\n"
                     "  output %4\n"
                     "}\n"
                     "# done\n";
    const char *want = "graph {\n"
                       "  %0 = input \"a\" : f32[4,8]\n"
                       "  %1 = param \"w\" init=normal f=0.5 : f32[3,8]\n"
                       "  %2 = matmul %0, %1 ta=0 tb=1 : f32[4,3]\n"
                       "  %3 = sum %2 axis=0 keepdim=0 : f32[3]\n"
                       "  %4 = sum %3 axis=0 keepdim=0 : f32[]\n"
                       "  %5 = full f=0.001 : f32[]\n"
                       "  backward\n"
                       "  %6 = full f=0 : f32[3,8]\n"
                       "  output %4\n"
                       "  loss %4\n"
                       "  grad %1 = %6\n"
                       "}\n";
    sn_graph *g = parse_ok(in);
    ck_assert_int_eq(g->n_forward, 6);
    ck_assert(g->has_backward);
    char *s = sn_graph_to_string(g);
    ck_assert_str_eq(s, want);
    free(s);
    sn_graph_free(g);
}
END_TEST

/* Every f32 bit pattern class prints in a form that reads back to the same value. */
START_TEST(test_float_roundtrip) {
    enum { N = 4096 };
    float *v = malloc(N * sizeof *v);
    ck_assert(v);
    uint32_t state = 12345;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;
        uint32_t bits = state ^ (state >> 13) * 2654435761u;
        memcpy(&v[i], &bits, sizeof bits);
    }
    v[0] = 1.4e-45f;        /* smallest subnormal */
    v[1] = 3.40282347e38f;  /* largest finite */
    v[2] = 16777217.0f;     /* rounds to 2^24 */
    v[3] = 1.17549435e-38f; /* smallest normal */
    sn_graph *g = sn_graph_new();
    NODE(g, CONST, .data = v, T(F32, N));
    char *s = sn_graph_to_string(g);
    sn_graph *g2 = parse_ok(s);
    for (int i = 0; i < N; i++)
        ck_assert_msg(same_float(v[i], g2->nodes[0]->data[i]), "value %d: %.9g read back as %.9g", i,
                      v[i], g2->nodes[0]->data[i]);
    free(s);
    free(v);
    sn_graph_free(g);
    sn_graph_free(g2);
}
END_TEST

#define H "graph {\n  %0 = input \"x\" : f32[2,3]\n"

static const struct {
    const char *text, *want;
} parse_errors[] = {
    {H "  %1 = frobnicate %0 : f32[2,3]\n}\n", "line 3: unknown op 'frobnicate'"},
    {"graph {\n  %0 = input \"x\" : f64[2]\n}\n", "line 2: expected a dtype (f32, bf16, f16, i32 or u8), found 'f64[2]'"},
    {H "  %1 = neg %4 : f32[2,3]\n}\n", "line 3: %4 is not defined here (this line may refer to %0..%0)"},
    {H "  %2 = neg %0 : f32[2,3]\n}\n", "line 3: expected node %1, found %2"},
    {H "  %1 = neg %0\n}\n", "line 3: expected ':' and the node's type (e.g. ': f32[4,8]'), found end of line"},
    {H "  %1 = neg %0 : f32[3,2]\n}\n", "line 3: declared type f32[3,2] but the shape rule for neg gives f32[2,3]"},
    {H "  %1 = matmul %0, %0 : f32[2,2]\n}\n",
     "line 3: matmul (would be node %1): a is f32[2,3], b is f32[2,3] (ta=0, tb=0): inner dimensions 3 and 2 differ"},
    {H "  %1 = add %0 : f32[2,3]\n}\n", "line 3: add (would be node %1): takes 2..2 inputs, got 1"},
    {H "  %1 = neg %0 axis=1 : f32[2,3]\n}\n",
     "line 3: expected an attribute of neg (it takes: none) or ':' and the type, found 'axis=1'"},
    {H "  %1 = sum %0 keep=1 : f32[2]\n}\n",
     "line 3: expected an attribute of sum (it takes: axis, keepdim) or ':' and the type, found 'keep=1'"},
    {H "  %1 = sum %0 axis=1 axis=0 : f32[2]\n}\n", "line 3: attribute 'axis' is given twice"},
    {H "  %1 = matmul %0, %0 ta=2 : f32[3,3]\n}\n", "line 3: ta is 2, outside 0..1"},
    {H "  %1 = neg %0 : f32[2,3] extra\n}\n", "line 3: expected the end of the line, found 'extra'"},
    {H "  %1 = neg \"n\" %0 : f32[2,3]\n}\n", "line 3: neg takes no name, found '\"n\"'"},
    {"graph {\n  %0 = const data=[1, 2] : f32[3]\n}\n", "line 2: data has 2 values but f32[3] needs 3"},
    {"graph {\n  %0 = const data=[1, x] : f32[2]\n}\n", "line 2: expected a value of data (a number, inf or nan), found 'x]'"},
    {"graph {\n  %0 = input \"x : f32[2]\n}\n", "line 2: expected the closing '\"' of the name, found end of line"},
    {"graph {\n  %0 = input \"a\\qb\" : f32[2]\n}\n", "line 2: expected an escape"},
    {H "  %1 = neg %0 : f32[2,3]\n  grad %1 = %0\n}\n", "line 4: grad of %1, which is neg; only params have grads"},
    {"graph {\n  %0 = param \"w\" : f32[2]\n  %1 = full : f32[3]\n  grad %0 = %1\n}\n",
     "line 4: the grad %1 is f32[3] but the param %0 is f32[2]; they must agree"},
    {H "  loss %0\n}\n", "line 3: the loss %0 is f32[2,3]; it must be a float scalar"},
    {H "  backward\n  backward\n}\n", "line 4: a second 'backward' line"},
    {H "  outptu %0\n}\n", "line 3: expected a node '%N = ...', backward, output, loss, logits, grad or '}', found 'outptu'"},
    {H, "line 3: expected '}' closing the graph, found end of text"},
    {H "}\n  output %0\n", "line 4: expected nothing after the closing '}', found 'output'"},
    {"graf {\n}\n", "line 1: expected 'graph {', found 'graf'"},
    {"# c\n\ngraph { # c\n  %0 = input \"x\" : f32[2]  # c\n\n  %1 = bogus %0\n}\n", "line 6: unknown op 'bogus'"},
    {"graph {\n  %0 = input \"x\" : f32[2,0]\n}\n", "line 2: a dimension is 0, outside 1.."},
    /* dimensions whose product overflows int64 (undefined behaviour in the size arithmetic) */
    {"graph {\n  %0 = input \"x\" : f32[4294967296,4294967296]\n}\n",
     "line 2: the shape [4294967296,4294967296] has more than 1152921504606846975 elements"},
    {"graph {\n  %0 = input \"x\" : f32[2000000000,2000000000,8]\n}\n", "overflows 64-bit sizes"},
    /* a pad whose start + size wrapped passed the rule, and the interpreter read past the input
     * (issue 19: heap-buffer-overflow in eval_layout) */
    {H "  %1 = pad %0 axis=0 start=9223372036854775807 end=4 : f32[4,3]\n}\n",
     "line 3: pad (would be node %1): cannot place f32[2,3] at 9223372036854775807 of an axis of size 4"},
};

START_TEST(test_parse_errors) {
    const char *text = parse_errors[_i].text, *want = parse_errors[_i].want;
    sn_graph *g = (sn_graph *)1;
    sn_err e = {0};
    sn_status st = sn_graph_parse(text, &g, &e);
    ck_assert_msg(st == SN_ERR_PARSE, "parsing\n%s\nreturned %d, not SN_ERR_PARSE", text, st);
    ck_assert_int_eq(e.code, SN_ERR_PARSE);
    ck_assert_ptr_null(g);
    ck_assert_has(e.msg, want);
}
END_TEST

/* ---- verifier ---- */

/* %0 x f32[4,8], %1 w f32[8,3], %2 matmul, %3 b f32[3], %4 add, %5 sum, %6 loss sum,
 * backward: %7 dw f32[8,3], %8 db f32[3]. */
static sn_graph *small_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = NODE(g, INPUT, .name = "x", T(F32, 4, 8));
    sn_node *w = NODE(g, PARAM, .name = "w", T(F32, 8, 3));
    sn_node *y = NODE(g, MATMUL, IN(x, w));
    sn_node *b = NODE(g, PARAM, .name = "b", T(F32, 3));
    sn_node *z = NODE(g, ADD, IN(y, b));
    sn_node *s = NODE(g, SUM, IN(z), .a = {.axis = 1});
    sn_node *l = NODE(g, SUM, IN(s), .a = {.axis = 0});
    g->has_backward = true;
    w->grad = NODE(g, FULL, T(F32, 8, 3));
    b->grad = NODE(g, FULL, T(F32, 3));
    g->loss = l;
    sn_graph_add_output(g, z);
    sn_graph_add_output(g, l);
    sn_err e = {0};
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "the uncorrupted graph must verify: %s", e.msg);
    return g;
}

static void verify_fails(sn_graph *g, sn_status code, const char *want) {
    sn_err e = {0};
    sn_status st = sn_verify(g, &e);
    ck_assert_msg(st == code, "sn_verify returned %d (%s), want %d", st, e.msg, code);
    ck_assert_int_eq(e.code, code);
    ck_assert_has(e.msg, want);
    sn_graph_free(g);
}

START_TEST(test_verify_stored_shape) {
    sn_graph *g = small_graph();
    g->nodes[4]->shape[1] = 9;
    verify_fails(g, SN_ERR_SHAPE, "node %4 (add): stored type f32[4,9] but the shape rule gives f32[4,3]");
}
END_TEST

START_TEST(test_verify_later_input) {
    sn_graph *g = small_graph();
    g->nodes[4]->in[1] = g->nodes[5];
    verify_fails(g, SN_ERR_INVALID, "node %4 (add): input 1 is %5, which is not an earlier node");
}
END_TEST

START_TEST(test_verify_grad_shape) {
    sn_graph *g = small_graph();
    g->nodes[1]->grad = g->nodes[8];
    verify_fails(g, SN_ERR_SHAPE, "node %1 (param): grad %8 is f32[3] but the param is f32[8,3]");
}
END_TEST

START_TEST(test_verify_loss_not_scalar) {
    sn_graph *g = small_graph();
    g->loss = g->nodes[4];
    verify_fails(g, SN_ERR_SHAPE, "the loss %4 (add) is f32[4,3]; it must be a float scalar");
}
END_TEST

START_TEST(test_verify_shape_rule) {
    sn_graph *g = small_graph();
    g->nodes[0]->shape[1] = 5;
    verify_fails(g, SN_ERR_SHAPE, "node %2 (matmul): a is f32[4,5], b is f32[8,3] (ta=0, tb=0): "
                                  "inner dimensions 5 and 8 differ");
}
END_TEST

START_TEST(test_verify_other) {
    sn_graph *g = small_graph();
    g->nodes[4]->id = 7;
    verify_fails(g, SN_ERR_INVALID, "node at index 4 has id 7");
    g = small_graph();
    g->nodes[4]->n_in = 1;
    verify_fails(g, SN_ERR_INVALID, "node %4 (add): has 1 inputs, but add takes 2..2");
    g = small_graph();
    g->nodes[2]->a.ta = 2;
    verify_fails(g, SN_ERR_INVALID, "node %2 (matmul): ta=2 tb=0; each must be 0 or 1");
    g = small_graph();
    g->nodes[4]->grad = g->nodes[8];
    verify_fails(g, SN_ERR_INVALID, "node %4 (add) has a grad; only params carry one");
    g = small_graph();
    g->n_forward = 99;
    verify_fails(g, SN_ERR_INVALID, "n_forward is 99 but the graph has 9 nodes");
    g = small_graph();
    sn_graph *other = small_graph();
    g->outputs[1] = other->nodes[6];
    verify_fails(g, SN_ERR_INVALID, "output 1 is not a node of this graph");
    sn_graph_free(other);
    g = small_graph();
    ck_assert_ptr_null(sn_graph_append(g, &(sn_node){.op = SN_OP_MATMUL, IN(g->nodes[0], g->nodes[0])}));
    verify_fails(g, SN_ERR_SHAPE, "the graph has a construction error: matmul (would be node %9)");
}
END_TEST

/* Input roles: printed as role=NAME when not none, parsed back, found by sn_graph_input; the
 * verifier takes one input of each role, of the dtype its readers feed, and roles on inputs only. */
START_TEST(test_roles) {
    const char *text = "graph {\n"
                       "  %0 = input \"tokens\" role=tokens : i32[2,3]\n"
                       "  %1 = input \"labels\" role=targets : i32[2,3]\n"
                       "  %2 = input \"s\" role=loss_scale : f32[]\n"
                       "  %3 = input \"plain\" : f32[2]\n"
                       "}\n";
    sn_graph *g = parse_ok(text);
    char *s = sn_graph_to_string(g);
    ck_assert_str_eq(s, text);
    free(s);
    ck_assert_ptr_eq(sn_graph_input(g, SN_ROLE_TOKENS), g->nodes[0]);
    ck_assert_ptr_eq(sn_graph_input(g, SN_ROLE_TARGETS), g->nodes[1]);
    ck_assert_ptr_eq(sn_graph_input(g, SN_ROLE_LOSS_SCALE), g->nodes[2]);
    ck_assert_ptr_null(sn_graph_input(g, SN_ROLE_MASK));
    g->nodes[1]->role = SN_ROLE_TOKENS;
    verify_fails(g, SN_ERR_INVALID, "inputs %0 \"tokens\" and %1 \"labels\" both have the role tokens; "
                                    "a graph has one input of each role");
    g = parse_ok(text);
    g->nodes[3]->role = SN_ROLE_TARGETS;
    g->nodes[1]->role = SN_ROLE_NONE;
    verify_fails(g, SN_ERR_DTYPE, "input %3 \"plain\" has the role targets but is f32[2]; it must be i32");
    g = small_graph();
    g->nodes[2]->role = SN_ROLE_MASK;
    verify_fails(g, SN_ERR_INVALID, "node %2 (matmul) has the role mask; only input nodes carry one");
    sn_err e = {0};
    ck_assert_int_eq(sn_graph_parse("graph {\n  %0 = input \"a\" role=idx : i32[2]\n}\n", &g, &e), SN_ERR_PARSE);
    ck_assert_has(e.msg, "expected a role (tokens, targets, loss_scale, positions or mask), found 'idx'");
    ck_assert_int_eq(sn_graph_parse("graph {\n  %0 = param \"a\" role=tokens : f32[2]\n}\n", &g, &e), SN_ERR_PARSE);
    ck_assert_has(e.msg, "expected an attribute of param");
}
END_TEST

/* ---- shape-rule messages at construction ---- */

static void append_fails(sn_graph *g, const sn_node *proto, const char *want) {
    ck_assert_ptr_null(sn_graph_append(g, proto));
    ck_assert_int_eq(g->err.code, SN_ERR_SHAPE);
    ck_assert_has(sn_graph_error(g), want);
    sn_graph_free(g);
}

/* An allocation no machine can make is a status with a message that names the size, what it
 * was for and what to do; the arena returns NULL instead of aborting. */
START_TEST(test_out_of_memory_is_a_status) {
    sn_err e = {0};
    size_t huge = SIZE_MAX / 4;
    ck_assert_ptr_null(sn_malloc(huge, "a test's buffer", &e));
    ck_assert_int_eq(e.code, SN_ERR_OOM);
    ck_assert_msg(strstr(e.msg, "out of memory: a test's buffer needs ") && strstr(e.msg, " GiB (") &&
                  strstr(e.msg, "use a smaller --batch or --seq, or a smaller model"), "%s", e.msg);
    e = (sn_err){0};
    ck_assert_ptr_null(sn_calloc(huge, 16, "an overflowing array", &e)); /* n * size overflows */
    ck_assert_msg(e.code == SN_ERR_OOM && strstr(e.msg, "an overflowing array"), "%s", e.msg);
    e = (sn_err){0};
    void *p = sn_malloc(16, "a small buffer", &e);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_null(sn_realloc(p, huge, "a grown buffer", &e)); /* p is still ours */
    ck_assert_msg(e.code == SN_ERR_OOM && strstr(e.msg, "a grown buffer"), "%s", e.msg);
    free(p);
    sn_arena a = {0};
    ck_assert_ptr_null(sn_arena_alloc(&a, SIZE_MAX - 8));
    ck_assert_ptr_nonnull(sn_arena_alloc(&a, 64));
    sn_arena_free(&a);
    char s[32];
    ck_assert_str_eq(sn_bytes_str((int64_t)3 << 30, s, sizeof s), "3.0 GiB");
    ck_assert_str_eq(sn_bytes_str(100, s, sizeof s), "100 bytes");
}
END_TEST

START_TEST(test_append_errors) {
    sn_graph *g = sn_graph_new();
    sn_node *a = NODE(g, INPUT, T(F32, 4, 8)), *b = NODE(g, INPUT, T(F32, 5, 3));
    append_fails(g, &(sn_node){.op = SN_OP_MATMUL, IN(a, b)},
                 "matmul (would be node %2): a is f32[4,8], b is f32[5,3] (ta=0, tb=0): "
                 "inner dimensions 8 and 5 differ");

    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 4, 8));
    b = NODE(g, INPUT, T(F32, 4, 3));
    append_fails(g, &(sn_node){.op = SN_OP_ADD, IN(a, b)},
                 "add (would be node %2): a is f32[4,8], b is f32[4,3]: shapes do not broadcast");

    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 4, 10));
    b = NODE(g, INPUT, T(F32, 4));
    append_fails(g, &(sn_node){.op = SN_OP_CROSS_ENTROPY, IN(a, b)},
                 "cross_entropy (would be node %2): targets are f32[4] but must be i32");

    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 4, 8));
    append_fails(g, &(sn_node){.op = SN_OP_RESHAPE, IN(a), T(F32, 5, 7)},
                 "reshape (would be node %1): cannot reshape f32[4,8] (32 elements) to [5,7] "
                 "(35 elements)");

    /* sizes that overflow int64: a declared shape, and one the matmul rule would produce */
    g = sn_graph_new();
    append_fails(g, &(sn_node){.op = SN_OP_INPUT, T(F32, 1L << 40, 1L << 30)},
                 "input (would be node %0): the declared shape [1099511627776,1073741824] has "
                 "more than 1152921504606846975 elements");
    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 1L << 31, 1));
    b = NODE(g, INPUT, T(F32, 1, 1L << 31));
    append_fails(g, &(sn_node){.op = SN_OP_MATMUL, IN(a, b)},
                 "matmul (would be node %2): the resulting shape [2147483648,2147483648] has more");

    /* grouped-query attention: k's and v's heads must divide q's and agree */
    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 2, 8, 5, 4));
    b = NODE(g, INPUT, T(F32, 2, 3, 5, 4));
    append_fails(g, &(sn_node){.op = SN_OP_ATTENTION_LSE, IN(a, b), .a = {.f = 0.5f}},
                 "attention_lse (would be node %2): k has 3 heads, q has 8: the kv heads must "
                 "divide the query heads");
    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 2, 8, 5, 4));
    b = NODE(g, INPUT, T(F32, 2, 2, 5, 4));
    sn_node *v4 = NODE(g, INPUT, T(F32, 2, 4, 5, 4)), *lse = NODE(g, INPUT, T(F32, 2, 8, 5));
    append_fails(g, &(sn_node){.op = SN_OP_ATTENTION, IN(a, b, v4, lse), .a = {.f = 0.5f}},
                 "v must be (.., S, Dv) with k's leading dimensions");
    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 2, 8, 5, 4));
    b = NODE(g, INPUT, T(F32, 1, 2, 5, 4)); /* only the heads may differ */
    append_fails(g, &(sn_node){.op = SN_OP_ATTENTION_LSE, IN(a, b), .a = {.f = 0.5f}},
                 "need q (.., T, D) and k (.., S, D) with the same leading dimensions");

    /* the first error sticks: later appends return NULL and keep the first message */
    g = sn_graph_new();
    a = NODE(g, INPUT, T(F32, 4, 8));
    b = NODE(g, INPUT, T(F32, 5, 3));
    ck_assert_ptr_null(sn_graph_append(g, &(sn_node){.op = SN_OP_MATMUL, IN(a, b)}));
    append_fails(g, &(sn_node){.op = SN_OP_NEG, IN(a)}, "inner dimensions 8 and 5 differ");
}
END_TEST

Suite *ir_suite(void) {
    Suite *s = suite_create("ir");
    TCase *tc = tcase_create("ir");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip_all_ops);
    tcase_add_test(tc, test_print_golden);
    tcase_add_test(tc, test_parse_canonical);
    tcase_add_test(tc, test_float_roundtrip);
    tcase_add_loop_test(tc, test_parse_errors, 0, (int)(sizeof parse_errors / sizeof parse_errors[0]));
    tcase_add_test(tc, test_verify_stored_shape);
    tcase_add_test(tc, test_verify_later_input);
    tcase_add_test(tc, test_verify_grad_shape);
    tcase_add_test(tc, test_verify_loss_not_scalar);
    tcase_add_test(tc, test_verify_shape_rule);
    tcase_add_test(tc, test_verify_other);
    tcase_add_test(tc, test_roles);
    tcase_add_test(tc, test_append_errors);
    tcase_add_test(tc, test_out_of_memory_is_a_status);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(ir_suite()); }
