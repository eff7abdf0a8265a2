/* standin_util.c: what each stand-in library links: its environment settings and its messages.
 * Convention: a setting is a decimal count, optionally with K, M or G (powers of 1024). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "standin.h"

uint64_t sn_standin_env(const char *name, uint64_t def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    switch (*end) {
    case 'K': case 'k': n <<= 10; end++; break;
    case 'M': case 'm': n <<= 20; end++; break;
    case 'G': case 'g': n <<= 30; end++; break;
    }
    if (end == v || *end) {
        sn_standin_say("%s=%s is not a number (like 12, 64M or 2G): using %llu", name, v,
                       (unsigned long long)def);
        return def;
    }
    return n;
}

void sn_standin_say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("sn_standin: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
