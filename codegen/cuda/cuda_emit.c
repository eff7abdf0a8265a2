/* cuda_emit.c: the one way CUDA source text is written: sn_cu_emitf, a format-checked line
 * emitter that indents by the blocks open and checks at the end that each was closed.
 * Convention: '{' ending a line opens a block, '}' starting one closes it (chibicc codegen.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_prelude.h"

enum { INDENT = 4 };

static void reserve(sn_cu_text *t, size_t more) {
    if (t->len + more + 1 <= t->cap) return;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1) cap *= 2;
    t->buf = realloc(t->buf, cap);
    SN_ASSERT(t->buf);
    t->cap = cap;
}

static void vappend(sn_cu_text *t, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    SN_ASSERT(n >= 0);
    reserve(t, (size_t)n);
    vsnprintf(t->buf + t->len, (size_t)n + 1, fmt, again);
    va_end(again);
    t->len += (size_t)n;
}

void sn_cu_appendf(sn_cu_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vappend(t, fmt, ap);
    va_end(ap);
}

void sn_cu_emitf(sn_cu_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    SN_ASSERT(n >= 0);
    char *line = malloc((size_t)n + 1);
    SN_ASSERT(line);
    va_start(ap, fmt);
    vsnprintf(line, (size_t)n + 1, fmt, ap);
    va_end(ap);
    if (line[0] == '}') {
        SN_ASSERT(t->depth > 0); /* a block closed that was never opened */
        t->depth--;
    }
    if (n > 0) /* an empty line gets no trailing spaces */
        sn_cu_appendf(t, "%*s%s", t->depth * INDENT, "", line);
    if (n > 0 && line[n - 1] == '{') t->depth++;
    sn_cu_appendf(t, "\n");
    free(line);
}

char *sn_cu_finish(sn_cu_text *t) {
    SN_ASSERT(t->depth == 0); /* every block opened was closed */
    reserve(t, 0);
    t->buf[t->len] = '\0';
    char *s = t->buf;
    *t = (sn_cu_text){0};
    return s;
}

const char *sn_cuda_prelude(void) { return sn_cuda_prelude_text; }
