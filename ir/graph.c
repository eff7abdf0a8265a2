/* graph.c: the graph container, its arena, and the dtype/op/status tables.
 * Convention: everything a graph points to lives in its arena; sn_graph_free releases it whole. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "ir.h"

/* ---- errors ---- */

_Noreturn void sn_assert_fail(const char *file, int line, const char *cond) {
    fprintf(stderr, "%s:%d: internal error: assertion failed: %s\n", file, line, cond);
    abort();
}

sn_status sn_fail(sn_err *e, sn_status code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

const char *sn_status_name(sn_status s) {
    static const char *names[] = {"ok",          "shape error",  "dtype error",
                                  "invalid",     "parse error",  "I/O error",
                                  "out of memory", "numeric error", "not supported yet",
                                  "device error", "internal error"};
    SN_ASSERT((unsigned)s < sizeof names / sizeof names[0]);
    return names[s];
}

/* ---- dtypes ---- */

static const struct {
    const char *name;
    int bits;
    bool is_float;
} dtypes[] = {
#define SN_X(name, text, bits, isf) {text, bits, isf},
    SN_DTYPES(SN_X)
#undef SN_X
};

const char *sn_dtype_name(sn_dtype t) {
    SN_ASSERT((unsigned)t < SN_DTYPE_COUNT);
    return dtypes[t].name;
}
int sn_dtype_bits(sn_dtype t) { return dtypes[t].bits; }
bool sn_dtype_is_float(sn_dtype t) { return dtypes[t].is_float; }

int sn_dtype_parse(const char *s, size_t len) {
    for (int i = 0; i < SN_DTYPE_COUNT; i++)
        if (strlen(dtypes[i].name) == len && !memcmp(dtypes[i].name, s, len)) return i;
    return -1;
}

/* Round to a float with `mant` explicit mantissa bits and exponent range [emin, emax]
 * (round-to-nearest-even, subnormals below emin, overflow to infinity). */
static double round_to_format(double v, int mant, int emin, int emax) {
    if (!isfinite(v) || v == 0) return v;
    int e;
    frexp(v, &e); /* v = m * 2^e, 0.5 <= |m| < 1: leading bit has exponent e-1 */
    int lead = e - 1;
    if (lead < emin) lead = emin; /* subnormal: fixed quantum */
    double quantum = ldexp(1.0, lead - mant);
    double r = nearbyint(v / quantum) * quantum; /* default rounding mode: nearest-even */
    if (fabs(r) >= ldexp(2.0, emax)) return v > 0 ? INFINITY : -INFINITY;
    return r;
}

/* An 8-bit float: rounded with an unbounded exponent above, then saturated to +-max. */
static double round_saturated(double v, int mant, int emin, double max) {
    if (isnan(v)) return v;
    double r = isinf(v) ? v : round_to_format(v, mant, emin, 1000);
    return r > max ? max : r < -max ? -max : r;
}

double sn_dtype_round(sn_dtype t, double v) {
    switch (t) {
    case SN_F32: return (double)(float)v;
    case SN_BF16: return round_to_format(v, 7, -126, 127);
    case SN_F16: return round_to_format(v, 10, -14, 15);
    case SN_F8E4M3: return round_saturated(v, 3, -6, 448);
    case SN_F8E5M2: return round_saturated(v, 2, -14, 57344);
    case SN_I32: case SN_U8: return v;
    case SN_DTYPE_COUNT: break;
    }
    SN_ASSERT(0);
}

double sn_pow2_scale_of(double x, double f) {
    if (!isfinite(x) || x == 0) return 1;
    int ex, ef;
    double mx = frexp(fabs(x), &ex), mf = frexp(f, &ef); /* both in [0.5, 1) */
    int k = ef - ex - (mx > mf);
    return ldexp(1, k < -126 ? -126 : k > 127 ? 127 : k);
}

bool sn_dtype_is_f8(sn_dtype t) { return t == SN_F8E4M3 || t == SN_F8E5M2; }

double sn_dtype_max(sn_dtype t) {
    switch (t) {
    case SN_F32: return FLT_MAX;
    case SN_BF16: return ldexp(255.0 / 128, 127);
    case SN_F16: return 65504;
    case SN_F8E4M3: return 448;
    case SN_F8E5M2: return 57344;
    default: SN_ASSERT(0);
    }
}

/* ---- ops ---- */

static const struct {
    const char *name;
    int lo, hi;
    sn_kind kind;
    bool grad;
    unsigned attrs;
} ops[] = {
#define SN_X(name, text, lo, hi, kind, grad, attrs) {text, lo, hi, kind, grad, attrs},
    SN_OPS(SN_X)
#undef SN_X
};

const char *sn_op_name(sn_op op) {
    SN_ASSERT((unsigned)op < SN_OP_COUNT);
    return ops[op].name;
}
int sn_op_parse(const char *s, size_t len) {
    for (int i = 0; i < SN_OP_COUNT; i++)
        if (strlen(ops[i].name) == len && !memcmp(ops[i].name, s, len)) return i;
    return -1;
}
sn_kind sn_op_kind(sn_op op) { return ops[op].kind; }
int sn_op_min_inputs(sn_op op) { return ops[op].lo; }
int sn_op_max_inputs(sn_op op) { return ops[op].hi; }
bool sn_op_has_grad(sn_op op) { return ops[op].grad; }
unsigned sn_op_attrs(sn_op op) { return ops[op].attrs; }

const char *sn_init_name(sn_init i) {
    static const char *names[] = {"zeros", "ones", "normal"};
    SN_ASSERT((unsigned)i < SN_INIT_COUNT);
    return names[i];
}

static const char *const role_names[] = {"none", "tokens", "targets", "loss_scale", "positions", "mask",
                                           "dropout_seed"};
_Static_assert(sizeof role_names / sizeof role_names[0] == SN_ROLE_COUNT, "a name for every role");

const char *sn_role_name(sn_role r) {
    SN_ASSERT((unsigned)r < SN_ROLE_COUNT);
    return role_names[r];
}
static bool role_is_ids(sn_role r) {
    return r == SN_ROLE_TOKENS || r == SN_ROLE_TARGETS || r == SN_ROLE_POSITIONS;
}
const char *sn_role_needs(sn_role r) {
    if (r == SN_ROLE_NONE) return NULL;
    if (r == SN_ROLE_DROPOUT_SEED) return "an f32 scalar";
    return role_is_ids(r) ? "i32" : r == SN_ROLE_LOSS_SCALE ? "a float scalar" : "float";
}
bool sn_role_fits(sn_role r, sn_dtype t, int rank) {
    if (r == SN_ROLE_NONE) return true;
    if ((unsigned)t >= SN_DTYPE_COUNT) return false;
    if (role_is_ids(r)) return t == SN_I32;
    if (r == SN_ROLE_DROPOUT_SEED) return t == SN_F32 && rank == 0;
    return sn_dtype_is_float(t) && (r != SN_ROLE_LOSS_SCALE || rank == 0);
}
int sn_role_parse(const char *s, size_t len) {
    for (int i = 0; i < SN_ROLE_COUNT; i++)
        if (strlen(role_names[i]) == len && !memcmp(role_names[i], s, len)) return i;
    return -1;
}

/* ---- arena ---- */

struct sn_arena_block {
    sn_arena_block *next;
    size_t cap, used;
    _Alignas(16) unsigned char mem[];
};

void *sn_arena_alloc(sn_arena *a, size_t size) {
    if (size > SIZE_MAX / 2) return NULL;
    size = (size + 15) & ~(size_t)15;
    sn_arena_block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->mem + b->used;
    b->used += size;
    a->used_bytes += size;
    memset(p, 0, size);
    return p;
}

char *sn_arena_strdup(sn_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = sn_arena_alloc(a, n);
    if (p) memcpy(p, s, n);
    return p;
}

void sn_arena_free(sn_arena *a) {
    for (sn_arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->used_bytes = 0;
}

/* ---- graph ---- */

sn_graph *sn_graph_new(void) { return calloc(1, sizeof(sn_graph)); }

void sn_graph_free(sn_graph *g) {
    if (!g) return;
    sn_arena_free(&g->arena);
    free(g->nodes);
    free(g->outputs);
    free(g);
}

const char *sn_graph_error(const sn_graph *g) { return g->err.code ? g->err.msg : NULL; }
sn_status sn_graph_status(const sn_graph *g) { return g->err.code; }

sn_node *sn_graph_input(const sn_graph *g, sn_role r) {
    SN_ASSERT(r != SN_ROLE_NONE);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && g->nodes[i]->role == r) return g->nodes[i];
    return NULL;
}

/* Doubles the array *p of *cap elements; false (g->err set, *p kept) when out of memory. */
static bool grow(sn_graph *g, void *p, int *cap, size_t elem) {
    int cap2 = *cap ? *cap * 2 : 64;
    void *q = sn_realloc(*(void **)p, (size_t)cap2 * elem, "a graph's node list", &g->err);
    if (!q) return false;
    *(void **)p = q;
    *cap = cap2;
    return true;
}

void sn_graph_clear_outputs(sn_graph *g) {
    g->n_outputs = 0;
    g->logits = NULL;
}

void sn_graph_add_output(sn_graph *g, sn_node *n) {
    if (!n) return;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == n) return;
    if (g->n_outputs == g->cap_outputs && !grow(g, &g->outputs, &g->cap_outputs, sizeof *g->outputs))
        return;
    g->outputs[g->n_outputs++] = n;
}

sn_node *sn_graph_append(sn_graph *g, const sn_node *proto) {
    if (g->err.code) return NULL;
    for (int i = 0; i < proto->n_in; i++)
        if (!proto->in[i]) {
            sn_fail(&g->err, SN_ERR_INVALID, "%s: input %d is NULL", sn_op_name(proto->op), i);
            return NULL;
        }
    sn_node tmp = *proto;
    char msg[600];
    if (sn_infer(&tmp, msg, sizeof msg) != 0) {
        sn_fail(&g->err, SN_ERR_SHAPE, "%s (would be node %%%d): %s", sn_op_name(proto->op),
                g->n_nodes, msg);
        return NULL;
    }
    size_t n_in = sizeof(sn_node *) * (size_t)proto->n_in;
    size_t bytes = proto->data ? sizeof(float) * (size_t)sn_shape_numel(tmp.rank, tmp.shape) : 0;
    sn_node *n = sn_arena_alloc(&g->arena, sizeof *n);
    if (!n || (n_in && !(n->in = sn_arena_alloc(&g->arena, n_in))) ||
        (proto->name && !(n->name = sn_arena_strdup(&g->arena, proto->name))) ||
        (bytes && !(n->data = sn_arena_alloc(&g->arena, bytes)))) {
        sn_fail_oom(&g->err, sizeof *n + n_in + bytes, "a graph node");
        return NULL;
    }
    sn_node **in = n->in;
    const char *name = n->name;
    float *data = n->data;
    *n = tmp;
    n->id = g->n_nodes;
    n->in = in;
    n->name = name;
    n->data = data;
    if (n_in) memcpy(n->in, proto->in, n_in);
    if (bytes) memcpy(n->data, proto->data, bytes);
    if (g->n_nodes == g->cap_nodes && !grow(g, &g->nodes, &g->cap_nodes, sizeof *g->nodes)) return NULL;
    g->nodes[g->n_nodes++] = n;
    if (!g->has_backward) g->n_forward = g->n_nodes;
    return n;
}

int64_t sn_shape_numel(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}
bool sn_shape_numel_checked(int rank, const int64_t *shape, int64_t *out) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0 || !sn_mul_i64(n, shape[i], &n) || n > SN_MAX_NUMEL) return false;
    if (out) *out = n;
    return true;
}
int64_t sn_numel(const sn_node *n) { return sn_shape_numel(n->rank, n->shape); }

char *sn_shape_str(int rank, const int64_t *shape, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

char *sn_type_str(const sn_node *n, char *buf, size_t len) {
    char s[96];
    snprintf(buf, len, "%s%s", sn_dtype_name(n->dtype), sn_shape_str(n->rank, n->shape, s, sizeof s));
    return buf;
}
