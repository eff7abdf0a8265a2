/* print.c: the text form of a graph, one node per line: `%3 = matmul %2, %1 ta=0 tb=1 : f32[4,50257]`.
 * Convention: the output is canonical (attributes in table-column order, floats in the shortest
 * form that reads back to the same f32), so print(parse(print(g))) == print(g) byte for byte. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Writes v in the shortest %.Ng (N <= 9) that strtof reads back to the same value; nan for NaN. */
static void print_float(FILE *f, float v) {
    if (isnan(v)) {
        fputs("nan", f);
        return;
    }
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v && signbit(strtof(buf, NULL)) == signbit(v)) break;
    }
    fputs(buf, f); /* %.9g always reads back exactly, so the loop ends with a good buf */
}

static void print_name(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\x%02x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Type as "f32[4,8]"; tolerant of a corrupt node, since printing is how one debugs it. */
static void print_type(FILE *f, const sn_node *n) {
    if ((unsigned)n->dtype < SN_DTYPE_COUNT) fputs(sn_dtype_name(n->dtype), f);
    else fprintf(f, "dtype?%d", (int)n->dtype);
    fputc('[', f);
    for (int i = 0; i < n->rank && i < SN_MAX_RANK; i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)n->shape[i]);
    fputc(']', f);
}

static void print_attrs(FILE *f, const sn_node *n, unsigned cols) {
    const sn_attrs *a = &n->a;
    if (cols & SN_A_INIT) {
        if ((unsigned)a->init < SN_INIT_COUNT) fprintf(f, " init=%s", sn_init_name(a->init));
        else fprintf(f, " init=?%d", (int)a->init);
        if (a->frozen) fprintf(f, " frozen=%d", a->frozen);
    }
    if (cols & (SN_A_F | SN_A_INIT)) {
        fputs(" f=", f);
        print_float(f, a->f);
    }
    if (cols & SN_A_AXIS) fprintf(f, " axis=%d", a->axis);
    if (cols & SN_A_KEEP) fprintf(f, " keepdim=%d", a->keepdim);
    if (cols & SN_A_TRANS) fprintf(f, " ta=%d tb=%d", a->ta, a->tb);
    if (cols & SN_A_PERM) {
        fputs(" perm=[", f);
        for (int i = 0; i < n->rank && i < SN_MAX_RANK; i++) fprintf(f, "%s%d", i ? "," : "", a->perm[i]);
        fputc(']', f);
    }
    if (cols & SN_A_RANGE) fprintf(f, " start=%lld end=%lld", (long long)a->start, (long long)a->end);
    if (cols & SN_A_IGNORE) fprintf(f, " ignore_index=%d", a->ignore_index);
    if (cols & SN_A_SITE) fprintf(f, " site=%d", a->site);
    if ((cols & SN_A_ROLE) && n->role != SN_ROLE_NONE) {
        if ((unsigned)n->role < SN_ROLE_COUNT) fprintf(f, " role=%s", sn_role_name(n->role));
        else fprintf(f, " role=?%d", (int)n->role);
    }
    if ((cols & SN_A_DATA) && n->data) {
        fputs(" data=[", f);
        int64_t numel = n->rank >= 0 && n->rank <= SN_MAX_RANK ? sn_numel(n) : 0;
        for (int64_t i = 0; i < numel; i++) {
            if (i) fputs(", ", f);
            print_float(f, n->data[i]);
        }
        fputc(']', f);
    }
}

static void print_node(FILE *f, const sn_node *n, int index) {
    bool known = (unsigned)n->op < SN_OP_COUNT;
    fprintf(f, "  %%%d = ", index);
    if (known) fputs(sn_op_name(n->op), f);
    else fprintf(f, "op?%d", (int)n->op);
    if (n->name) {
        fputc(' ', f);
        print_name(f, n->name);
    }
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i]) fprintf(f, "%s%%%d", i ? ", " : " ", n->in[i]->id);
        else fprintf(f, "%s%%null", i ? ", " : " ");
    }
    if (known) print_attrs(f, n, sn_op_attrs(n->op));
    fputs(" : ", f);
    print_type(f, n);
    fputc('\n', f);
}

static int ref_id(const sn_node *n) { return n ? n->id : -1; }

void sn_graph_print(const sn_graph *g, FILE *f) {
    fputs("graph {\n", f);
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->has_backward && i == g->n_forward) fputs("  backward\n", f);
        print_node(f, g->nodes[i], i);
    }
    if (g->has_backward && g->n_forward >= g->n_nodes) fputs("  backward\n", f);
    for (int i = 0; i < g->n_outputs; i++) fprintf(f, "  output %%%d\n", ref_id(g->outputs[i]));
    if (g->loss) fprintf(f, "  loss %%%d\n", g->loss->id);
    if (g->logits) fprintf(f, "  logits %%%d\n", g->logits->id);
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->grad) fprintf(f, "  grad %%%d = %%%d\n", i, n->grad->id);
    }
    fputs("}\n", f);
}

char *sn_graph_to_string(const sn_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    SN_ASSERT(f);
    sn_graph_print(g, f);
    SN_ASSERT(fclose(f) == 0);
    return buf;
}
