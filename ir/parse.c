/* parse.c: reads the text form written by print.c back into a new graph.
 * Convention: one statement per line; every node is built through sn_graph_append, so the shape
 * rules run on parsed text exactly as on API calls. Attributes may come in any order, and an
 * omitted one is 0 (print always writes them all). Errors: SN_ERR_PARSE, "line N: ...". */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct {
    const char *s; /* cursor */
    int line;
    sn_graph *g;
    sn_err *e;
    char found[48];   /* description of the text at the cursor, for messages */
    float *data;      /* a const's values while its line is read */
    int64_t n_data, cap_data;
    char *name;       /* an input's or param's name while its line is read */
    size_t cap_name;
} parser;

static sn_status perr(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static sn_status perr(parser *p, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sn_fail(p->e, SN_ERR_PARSE, "line %d: %s", p->line, msg);
}

/* Skips blanks and a comment, never the newline. */
static void skip_ws(parser *p) {
    while (*p->s == ' ' || *p->s == '\t' || *p->s == '\r') p->s++;
    if (*p->s == '#')
        while (*p->s && *p->s != '\n') p->s++;
}

static bool at_eol(parser *p) {
    skip_ws(p);
    return *p->s == '\n' || *p->s == '\0';
}

/* "'tok'", "end of line" or "end of text": what stands at the cursor. */
static const char *found(parser *p) {
    skip_ws(p);
    if (*p->s == '\0') return "end of text";
    if (*p->s == '\n') return "end of line";
    int n = 0;
    while (p->s[n] && p->s[n] != ' ' && p->s[n] != '\t' && p->s[n] != '\n' && p->s[n] != '\r' &&
           n < 24)
        n++;
    snprintf(p->found, sizeof p->found, "'%.*s'", n, p->s);
    return p->found;
}

static bool is_word_char(char c, bool first) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
}

/* An identifier at the cursor (length 0 if none). */
static size_t word(parser *p, const char **start) {
    skip_ws(p);
    *start = p->s;
    size_t n = 0;
    if (is_word_char(p->s[0], true))
        while (is_word_char(p->s[n], n == 0)) n++;
    return n;
}

static bool accept(parser *p, char c) {
    skip_ws(p);
    if (*p->s != c) return false;
    p->s++;
    return true;
}

static sn_status expect(parser *p, char c, const char *what) {
    if (accept(p, c)) return SN_OK;
    return perr(p, "expected %s, found %s", what, found(p));
}

static sn_status expect_eol(parser *p) {
    if (at_eol(p)) return SN_OK;
    return perr(p, "expected the end of the line, found %s", found(p));
}

static sn_status parse_int(parser *p, int64_t lo, int64_t hi, const char *what, int64_t *v) {
    skip_ws(p);
    char *end;
    errno = 0;
    long long x = strtoll(p->s, &end, 10);
    if (end == p->s || (*p->s != '-' && (*p->s < '0' || *p->s > '9')))
        return perr(p, "expected %s (an integer), found %s", what, found(p));
    if (errno == ERANGE || x < lo || x > hi)
        return perr(p, "%s is %.*s, outside %lld..%lld", what, (int)(end - p->s), p->s,
                    (long long)lo, (long long)hi);
    p->s = end;
    *v = x;
    return SN_OK;
}

static sn_status parse_float(parser *p, const char *what, float *v) {
    skip_ws(p);
    char *end;
    float x = strtof(p->s, &end);
    if (end == p->s || !strchr(" \t\r\n,]#", *end))
        return perr(p, "expected %s (a number, inf or nan), found %s", what, found(p));
    p->s = end;
    *v = x;
    return SN_OK;
}

/* %k referring to an existing node. */
static sn_status parse_ref(parser *p, const char *what, sn_node **out) {
    skip_ws(p);
    if (*p->s != '%') return perr(p, "expected %s (%%N), found %s", what, found(p));
    p->s++;
    int64_t id;
    if (parse_int(p, 0, INT_MAX, "a node number after '%'", &id)) return SN_ERR_PARSE;
    if (id >= p->g->n_nodes)
        return perr(p, "%%%lld is not defined here (this line may refer to %%0..%%%d)", (long long)id,
                    p->g->n_nodes - 1);
    *out = p->g->nodes[id];
    return SN_OK;
}

static sn_status parse_string(parser *p) {
    SN_ASSERT(*p->s == '"');
    p->s++;
    size_t n = 0;
    if (!p->name && !(p->name = sn_malloc(p->cap_name = 64, "the parser's name buffer", p->e)))
        return SN_ERR_OOM;
    for (;;) {
        char c = *p->s++;
        if (c == '"') break;
        if (c == '\0' || c == '\n') {
            p->s--;
            return perr(p, "expected the closing '\"' of the name, found %s", found(p));
        }
        if (c == '\\') {
            char esc = *p->s++;
            if (esc == 'n') c = '\n';
            else if (esc == 't') c = '\t';
            else if (esc == '"' || esc == '\\') c = esc;
            else if (esc == 'x' && strchr("0123456789abcdefABCDEF", p->s[0]) && p->s[0] &&
                     strchr("0123456789abcdefABCDEF", p->s[1]) && p->s[1]) {
                char hex[3] = {p->s[0], p->s[1], 0};
                c = (char)strtol(hex, NULL, 16);
                p->s += 2;
            } else {
                p->s -= 2;
                return perr(p, "expected an escape \\\" \\\\ \\n \\t or \\xHH in the name, found %s",
                            found(p));
            }
            if (c == '\0') return perr(p, "a name cannot contain \\x00");
        }
        if (n + 1 >= p->cap_name) {
            char *name = sn_realloc(p->name, 2 * p->cap_name, "the parser's name buffer", p->e);
            if (!name) return SN_ERR_OOM;
            p->name = name;
            p->cap_name *= 2;
        }
        p->name[n++] = c;
    }
    p->name[n] = 0;
    return SN_OK;
}

/* [a, b, ...] of floats into p->data. */
static sn_status parse_data(parser *p) {
    if (expect(p, '[', "'[' opening the const's values")) return SN_ERR_PARSE;
    p->n_data = 0;
    if (accept(p, ']')) return SN_OK;
    do {
        if (p->n_data == p->cap_data) {
            int64_t cap = p->cap_data ? 2 * p->cap_data : 64;
            float *data = sn_realloc(p->data, sizeof(float) * (size_t)cap, "a const's values", p->e);
            if (!data) return SN_ERR_OOM;
            p->data = data;
            p->cap_data = cap;
        }
        if (parse_float(p, "a value of data", &p->data[p->n_data++])) return SN_ERR_PARSE;
    } while (accept(p, ','));
    return expect(p, ']', "',' or ']' in data");
}

static sn_status parse_perm(parser *p, sn_attrs *a, int *n_perm) {
    if (expect(p, '[', "'[' opening perm")) return SN_ERR_PARSE;
    *n_perm = 0;
    if (accept(p, ']')) return SN_OK;
    do {
        int64_t v;
        if (*n_perm == SN_MAX_RANK) return perr(p, "perm has more than %d entries", SN_MAX_RANK);
        if (parse_int(p, 0, SN_MAX_RANK - 1, "a perm entry", &v)) return SN_ERR_PARSE;
        a->perm[(*n_perm)++] = (int)v;
    } while (accept(p, ','));
    return expect(p, ']', "',' or ']' in perm");
}

/* ---- attributes: key, the column that allows it ---- */

enum { K_INIT, K_F, K_AXIS, K_KEEP, K_TA, K_TB, K_PERM, K_START, K_END, K_IGNORE, K_DATA, K_FROZEN,
       K_ROLE, K_SITE, K_COUNT };
static const struct {
    const char *key;
    unsigned cols;
} keys[K_COUNT] = {
    [K_INIT] = {"init", SN_A_INIT},      [K_F] = {"f", SN_A_F | SN_A_INIT},
    [K_AXIS] = {"axis", SN_A_AXIS},      [K_KEEP] = {"keepdim", SN_A_KEEP},
    [K_TA] = {"ta", SN_A_TRANS},         [K_TB] = {"tb", SN_A_TRANS},
    [K_PERM] = {"perm", SN_A_PERM},      [K_START] = {"start", SN_A_RANGE},
    [K_END] = {"end", SN_A_RANGE},       [K_IGNORE] = {"ignore_index", SN_A_IGNORE},
    [K_DATA] = {"data", SN_A_DATA},      [K_FROZEN] = {"frozen", SN_A_INIT},
    [K_ROLE] = {"role", SN_A_ROLE},      [K_SITE] = {"site", SN_A_SITE},
};

static void allowed_keys(sn_op op, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < K_COUNT && k < len; i++)
        if (keys[i].cols & sn_op_attrs(op))
            k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? ", " : "", keys[i].key);
    if (!k) snprintf(buf, len, "none");
}

static sn_status parse_attr(parser *p, sn_node *n, unsigned *seen, int *n_perm) {
    const char *w;
    size_t len = word(p, &w);
    int k = 0;
    while (k < K_COUNT && !(strlen(keys[k].key) == len && !memcmp(keys[k].key, w, len))) k++;
    if (k == K_COUNT || !(keys[k].cols & sn_op_attrs(n->op))) {
        char ok[128];
        allowed_keys(n->op, ok, sizeof ok);
        return perr(p, "expected an attribute of %s (it takes: %s) or ':' and the type, found %s",
                    sn_op_name(n->op), ok, found(p));
    }
    if (*seen & (1u << k)) return perr(p, "attribute '%s' is given twice", keys[k].key);
    *seen |= 1u << k;
    p->s = w + len;
    if (expect(p, '=', "'=' after the attribute name")) return SN_ERR_PARSE;
    int64_t v = 0;
    sn_status st = SN_OK;
    sn_attrs *a = &n->a;
    switch (k) {
    case K_INIT: {
        const char *iw;
        size_t il = word(p, &iw);
        int i = 0;
        while (i < SN_INIT_COUNT && !(strlen(sn_init_name(i)) == il && !memcmp(sn_init_name(i), iw, il))) i++;
        if (i == SN_INIT_COUNT)
            return perr(p, "expected an init rule (zeros, ones or normal), found %s", found(p));
        a->init = (sn_init)i;
        p->s = iw + il;
        return SN_OK;
    }
    case K_F: return parse_float(p, "the value of f", &a->f);
    case K_AXIS: st = parse_int(p, 0, SN_MAX_RANK - 1, "axis", &v); a->axis = (int)v; break;
    case K_KEEP: st = parse_int(p, 0, 1, "keepdim", &v); a->keepdim = (int)v; break;
    case K_TA: st = parse_int(p, 0, 1, "ta", &v); a->ta = (int)v; break;
    case K_TB: st = parse_int(p, 0, 1, "tb", &v); a->tb = (int)v; break;
    case K_PERM: return parse_perm(p, a, n_perm);
    case K_START: st = parse_int(p, 0, INT64_MAX, "start", &v); a->start = v; break;
    case K_END: st = parse_int(p, 0, INT64_MAX, "end", &v); a->end = v; break;
    case K_IGNORE: st = parse_int(p, INT_MIN, INT_MAX, "ignore_index", &v); a->ignore_index = (int)v; break;
    case K_DATA: return parse_data(p);
    case K_FROZEN: st = parse_int(p, 0, 1, "frozen", &v); a->frozen = (int)v; break;
    case K_SITE: st = parse_int(p, 0, INT_MAX, "site", &v); a->site = (int)v; break;
    case K_ROLE: {
        const char *rw;
        size_t rl = word(p, &rw);
        int r = sn_role_parse(rw, rl);
        if (r <= SN_ROLE_NONE)
            return perr(p, "expected a role (tokens, targets, loss_scale, positions or mask), found %s",
                        found(p));
        n->role = (sn_role)r;
        p->s = rw + rl;
        return SN_OK;
    }
    default: SN_ASSERT(0);
    }
    return st;
}

static sn_status parse_type(parser *p, sn_node *n) {
    if (expect(p, ':', "':' and the node's type (e.g. ': f32[4,8]')")) return SN_ERR_PARSE;
    const char *w;
    size_t len = word(p, &w);
    int t = sn_dtype_parse(w, len);
    if (t < 0) {
        if (len) p->s = w;
        return perr(p, "expected a dtype (f32, bf16, f16, i32 or u8), found %s", found(p));
    }
    n->dtype = (sn_dtype)t;
    p->s = w + len;
    if (expect(p, '[', "'[' opening the shape")) return SN_ERR_PARSE;
    n->rank = 0;
    if (accept(p, ']')) return SN_OK;
    do {
        if (n->rank == SN_MAX_RANK) return perr(p, "more than %d dimensions", SN_MAX_RANK);
        if (parse_int(p, 1, INT64_MAX, "a dimension", &n->shape[n->rank++])) return SN_ERR_PARSE;
    } while (accept(p, ','));
    if (expect(p, ']', "',' or ']' in the shape")) return SN_ERR_PARSE;
    if (!sn_shape_numel_checked(n->rank, n->shape, NULL)) {
        char s[96];
        return perr(p, "the shape %s has more than %lld elements (the product of its dimensions "
                    "overflows 64-bit sizes)", sn_shape_str(n->rank, n->shape, s, sizeof s),
                    (long long)SN_MAX_NUMEL);
    }
    return SN_OK;
}

static bool same_type(const sn_node *a, const sn_node *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* %N = op ["name"] [%a, %b ...] [key=value ...] : type */
static sn_status parse_node(parser *p) {
    sn_graph *g = p->g;
    p->s++; /* '%' */
    int64_t id;
    if (parse_int(p, 0, INT_MAX, "a node number after '%'", &id)) return SN_ERR_PARSE;
    if (id != g->n_nodes)
        return perr(p, "expected node %%%d, found %%%lld (nodes are numbered %%0, %%1, ... in order)",
                    g->n_nodes, (long long)id);
    if (expect(p, '=', "'=' after the node number")) return SN_ERR_PARSE;
    const char *w;
    size_t len = word(p, &w);
    int op = sn_op_parse(w, len);
    if (op < 0) {
        if (len) return perr(p, "unknown op '%.*s' (the ops are listed in ir/ops.h)", (int)len, w);
        return perr(p, "expected an op name, found %s", found(p));
    }
    p->s = w + len;
    sn_node n = {.op = (sn_op)op};
    sn_node *in[SN_MAX_INPUTS];
    skip_ws(p);
    if (*p->s == '"') {
        if (!(sn_op_attrs(n.op) & SN_A_NAME))
            return perr(p, "%s takes no name, found %s", sn_op_name(n.op), found(p));
        if (parse_string(p)) return SN_ERR_PARSE;
        n.name = p->name;
    }
    skip_ws(p);
    if (*p->s == '%') {
        do {
            if (n.n_in == SN_MAX_INPUTS) return perr(p, "more than %d inputs", SN_MAX_INPUTS);
            if (parse_ref(p, "an input", &in[n.n_in++])) return SN_ERR_PARSE;
        } while (accept(p, ','));
    }
    n.in = in;
    unsigned seen = 0;
    int n_perm = 0;
    p->n_data = 0;
    while (!at_eol(p) && *p->s != ':')
        if (parse_attr(p, &n, &seen, &n_perm)) return SN_ERR_PARSE;
    if (parse_type(p, &n) || expect_eol(p)) return SN_ERR_PARSE;
    char t[96], u[96];
    if (seen & (1u << K_DATA)) {
        if (p->n_data != sn_numel(&n))
            return perr(p, "data has %lld values but %s needs %lld", (long long)p->n_data,
                        sn_type_str(&n, t, sizeof t), (long long)sn_numel(&n));
        n.data = p->data;
    }
    if (n.op == SN_OP_PERMUTE && n.n_in == 1 && n_perm != in[0]->rank)
        return perr(p, "perm has %d entries but the input %%%d is %s", n_perm, in[0]->id,
                    sn_type_str(in[0], t, sizeof t));
    sn_node *made = sn_graph_append(g, &n);
    if (!made && g->err.code == SN_ERR_OOM) return sn_fail(p->e, SN_ERR_OOM, "%s", g->err.msg);
    if (!made) return perr(p, "%s", g->err.msg);
    if (!same_type(made, &n))
        return perr(p, "declared type %s but the shape rule for %s gives %s",
                    sn_type_str(&n, t, sizeof t), sn_op_name(n.op), sn_type_str(made, u, sizeof u));
    return SN_OK;
}

/* backward | output %k | loss %k | logits %k | grad %p = %g */
static sn_status parse_statement(parser *p, const char *w, size_t len) {
    sn_graph *g = p->g;
    char t[96], u[96];
    sn_node *a, *b;
    p->s = w + len;
    if (len == 8 && !memcmp(w, "backward", 8)) {
        if (g->has_backward) return perr(p, "a second 'backward' line (there is one per graph)");
        g->has_backward = true;
        g->n_forward = g->n_nodes;
    } else if (len == 6 && !memcmp(w, "output", 6)) {
        if (parse_ref(p, "the output node", &a)) return SN_ERR_PARSE;
        sn_graph_add_output(g, a);
    } else if (len == 4 && !memcmp(w, "loss", 4)) {
        if (g->loss) return perr(p, "a second 'loss' line (there is one per graph)");
        if (parse_ref(p, "the loss node", &a)) return SN_ERR_PARSE;
        if (a->rank != 0 || !sn_dtype_is_float(a->dtype))
            return perr(p, "the loss %%%d is %s; it must be a float scalar", a->id,
                        sn_type_str(a, t, sizeof t));
        g->loss = a;
    } else if (len == 6 && !memcmp(w, "logits", 6)) {
        if (g->logits) return perr(p, "a second 'logits' line (there is one per graph)");
        if (parse_ref(p, "the logits node", &a)) return SN_ERR_PARSE;
        if (a->rank < 2 || !sn_dtype_is_float(a->dtype))
            return perr(p, "the logits %%%d are %s; they must be a float (.., V) value", a->id,
                        sn_type_str(a, t, sizeof t));
        bool out = false;
        for (int i = 0; i < g->n_outputs; i++) out = out || g->outputs[i] == a;
        if (!out) return perr(p, "the logits %%%d are no output (an 'output' line before it)", a->id);
        g->logits = a;
    } else if (len == 4 && !memcmp(w, "grad", 4)) {
        if (parse_ref(p, "the param", &a)) return SN_ERR_PARSE;
        if (expect(p, '=', "'=' after 'grad %N'") || parse_ref(p, "the gradient node", &b))
            return SN_ERR_PARSE;
        if (a->op != SN_OP_PARAM)
            return perr(p, "grad of %%%d, which is %s; only params have grads", a->id,
                        sn_op_name(a->op));
        if (a->grad) return perr(p, "a second grad for %%%d", a->id);
        if (!same_type(a, b))
            return perr(p, "the grad %%%d is %s but the param %%%d is %s; they must agree", b->id,
                        sn_type_str(b, t, sizeof t), a->id, sn_type_str(a, u, sizeof u));
        a->grad = b;
    } else {
        p->s = w;
        return perr(p, "expected a node '%%N = ...', backward, output, loss, logits, grad or '}', found %s",
                    found(p));
    }
    return expect_eol(p);
}

/* Skips blank and comment lines; false at the end of the text. */
static bool next_line(parser *p) {
    while (at_eol(p)) {
        if (*p->s == '\0') return false;
        p->s++;
        p->line++;
    }
    return true;
}

static sn_status parse_graph(parser *p) {
    const char *w;
    size_t len;
    if (!next_line(p) || (len = word(p, &w)) != 5 || memcmp(w, "graph", 5))
        return perr(p, "expected 'graph {', found %s", found(p));
    p->s = w + len;
    if (expect(p, '{', "'{' after 'graph'") || expect_eol(p)) return SN_ERR_PARSE;
    for (;;) {
        if (!next_line(p)) return perr(p, "expected '}' closing the graph, found end of text");
        if (accept(p, '}')) break;
        sn_status st;
        if (*p->s == '%') st = parse_node(p);
        else st = (len = word(p, &w)) ? parse_statement(p, w, len)
                                      : perr(p, "expected a node '%%N = ...', backward, output, "
                                             "loss, logits, grad or '}', found %s", found(p));
        if (st) return st;
    }
    if (expect_eol(p)) return SN_ERR_PARSE;
    if (next_line(p)) return perr(p, "expected nothing after the closing '}', found %s", found(p));
    return SN_OK;
}

sn_status sn_graph_parse(const char *text, sn_graph **out, sn_err *e) {
    SN_ASSERT(text && out);
    *out = NULL;
    parser p = {.s = text, .line = 1, .g = sn_graph_new(), .e = e};
    if (!p.g) return sn_fail_oom(e, sizeof *p.g, "a parsed graph");
    sn_status st = parse_graph(&p);
    free(p.data);
    free(p.name);
    if (st == SN_OK) {
        sn_err ve;
        if (sn_verify(p.g, &ve))
            st = sn_fail(e, SN_ERR_PARSE, "line %d: the parsed graph does not verify: %s", p.line,
                         ve.msg);
    }
    if (st != SN_OK) {
        sn_graph_free(p.g);
        return st;
    }
    *out = p.g;
    return SN_OK;
}
