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

/* Room for `more` bytes and a NUL; false (t->oom set) when out of memory. */
static bool reserve(sn_cu_text *t, size_t more) {
    if (t->oom) return false;
    if (t->len + more + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1) cap *= 2;
    char *buf = realloc(t->buf, cap);
    if (!buf) {
        t->oom = cap;
        return false;
    }
    t->buf = buf;
    t->cap = cap;
    return true;
}

static void vappend(sn_cu_text *t, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    SN_ASSERT(n >= 0);
    if (!reserve(t, (size_t)n)) {
        va_end(again);
        return;
    }
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
    char *line = t->oom ? NULL : malloc((size_t)n + 1);
    if (!line) {
        if (!t->oom) t->oom = (size_t)n + 1;
        return;
    }
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
    SN_ASSERT(t->oom || t->depth == 0); /* every block opened was closed */
    char *s = reserve(t, 0) ? t->buf : NULL;
    if (s) s[t->len] = '\0';
    else free(t->buf);
    *t = (sn_cu_text){0};
    return s;
}

const char *sn_cuda_prelude(void) { return sn_cuda_prelude_text; }
