/* bpe_sp.c: SentencePiece's byte-fallback BPE as Hugging Face's tokenizers run it
 * (TinyLlama, Llama 2): words from characters with spaces as U+2581, merged by a heap in rank
 * order, bytes without a token as <0xXX> tokens, and decoding back through them. */
#include "bpe_engine.h"

#include <stdlib.h>
#include <string.h>

/* Room for n symbols (and 3n heap entries: the first pairs, then two a merge); false when out of
 * memory. */
static bool sp_room(sn_bpe *g, size_t n) {
    if (n > g->sym_cap) {
        if (!sn_bpe_resize(&g->sym, 2 * n * sizeof *g->sym)) return false;
        g->sym_cap = 2 * n;
    }
    if (3 * n + 1 > g->heap_cap) {
        if (!sn_bpe_resize(&g->heap, (6 * n + 2) * sizeof *g->heap)) return false;
        g->heap_cap = 6 * n + 2;
    }
    return true;
}

static bool merge_before(const sp_merge *a, const sp_merge *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(sp_merge *h, size_t *n, sp_merge m) {
    size_t i = (*n)++;
    for (; i > 0 && merge_before(&m, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = m;
}

static sp_merge heap_pop(sp_merge *h, size_t *n) {
    sp_merge top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && merge_before(&h[c + 1], &h[c])) c++;
        if (!merge_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Pushes the merge of symbol a with its right neighbour, if the pair is a merge. */
static void sp_pair(const gpt2 *g, sp_merge *h, size_t *nh, const sp_sym *sym, int32_t a) {
    if (a < 0 || sym[a].next < 0) return;
    const pair_slot *p = sn_bpe_pair_find(g, sym[a].id, sym[sym[a].next].id);
    if (p) heap_push(h, nh, (sp_merge){p->rank, a, p->id});
}

/* The ids of word w[0, n) (at most n) in ids: each character its token, else its bytes' <0xXX>
 * tokens, else unk (consecutive ones fused when sp.fuse_unk; as in Hugging Face's, byte tokens
 * do not end a pending unk), else nothing; then merges by rank, the leftmost first. A byte that
 * is not UTF-8 is a character of its own. */
bool sn_bpe_sp_merge_word(gpt2 *g, const char *w, size_t n, int32_t *ids, size_t *count) {
    int32_t whole = g->ignore_merges ? sn_bpe_find(g, w, n) : -1;
    if (whole >= 0) {
        ids[0] = whole;
        *count = 1;
        return true;
    }
    if (!sp_room(g, n)) return false;
    sp_sym *sym = g->sym;
    int32_t m = 0;
    bool unk = false; /* an unk pending */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        if (sn_bpe_utf8_next((const unsigned char *)w, n, &j) < 0) j = i + 1;
        int32_t id = sn_bpe_find(g, w + i, j - i);
        bool bytes = id < 0 && g->sp.byte_fallback;
        for (size_t k = i; k < j && bytes; k++) bytes = g->fallback[(unsigned char)w[k]] >= 0;
        if (id >= 0) {
            if (unk) sym[m++].id = g->sp.unk, unk = false;
            sym[m++].id = id;
        } else if (bytes) {
            for (size_t k = i; k < j; k++) sym[m++].id = g->fallback[(unsigned char)w[k]];
        } else if (g->sp.unk >= 0) {
            if (unk && !g->sp.fuse_unk) sym[m++].id = g->sp.unk;
            unk = true;
        }
        i = j;
    }
    if (unk) sym[m++].id = g->sp.unk;
    size_t nh = 0;
    for (int32_t k = 0; k < m; k++) sym[k] = (sp_sym){sym[k].id, k - 1, k + 1 < m ? k + 1 : -1, false};
    for (int32_t k = 0; k + 1 < m; k++) sp_pair(g, g->heap, &nh, sym, k);
    while (nh) {
        sp_merge top = heap_pop(g->heap, &nh);
        sp_sym *a = &sym[top.pos];
        if (a->gone || a->next < 0) continue;
        const pair_slot *p = sn_bpe_pair_find(g, a->id, sym[a->next].id);
        if (!p || p->id != top.id) continue; /* the pair changed since it was pushed */
        sp_sym *b = &sym[a->next];
        a->id = top.id;
        b->gone = true;
        a->next = b->next;
        if (a->next >= 0) sym[a->next].prev = top.pos;
        sp_pair(g, g->heap, &nh, sym, a->prev);
        sp_pair(g, g->heap, &nh, sym, top.pos);
    }
    size_t out = 0;
    for (int32_t k = m ? 0 : -1; k >= 0; k = sym[k].next) ids[out++] = sym[k].id;
    *count = out;
    return true;
}

/* The character ending at s[end) (end > 0) as up to 4 bytes in a number; its length in *len. */
static uint32_t last_char(const char *s, size_t end, size_t *len) {
    size_t at = end - 1;
    while (at > 0 && end - at < 4 && ((unsigned char)s[at] & 0xc0) == 0x80) at--;
    if (((unsigned char)s[at] & 0xc0) == 0x80) at = end - 1; /* no lead byte: the byte alone */
    uint32_t v = 0;
    for (size_t k = at; k < end; k++) v = v << 8 | (unsigned char)s[k];
    *len = end - at;
    return v;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Where a word without a pre-tokenizer may be cut without changing its ids: a merge that joins
 * across "c|SP" has a left side ending in c and a right side starting with SP (the token's
 * merge tree splits there at some level), so the c of no such merge is a safe cut. */
sn_status sn_bpe_sp_cuts(sn_bpe *g, sn_err *e) {
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (uint32_t i = 0; g->ptab && i <= g->pmask; i++) {
            if (g->ptab[i].key == UINT64_MAX) continue;
            const span *a = &g->tok[g->ptab[i].key >> 32], *b = &g->tok[(uint32_t)g->ptab[i].key];
            if (b->len < 3 || memcmp(g->pool + b->off, SP, 3)) continue;
            size_t len;
            uint32_t c = last_char(g->pool + a->off, a->len, &len);
            if (pass) g->cross[n] = c;
            n++;
        }
        if (!pass && !sn_bpe_resize(&g->cross, n * sizeof *g->cross)) return sn_bpe_tables_oom(g, e, n * 4);
    }
    qsort(g->cross, n, sizeof *g->cross, cmp_u32);
    g->n_cross = n;
    return SN_OK;
}

/* Whether word t[i, m) may be cut before the SP at p (i < p < m): no merge joins across it, and
 * the character before it and SP are tokens of their own (no byte fallback or unk there). */
static bool sp_cut_ok(const gpt2 *g, const char *t, size_t p) {
    size_t len;
    uint32_t c = last_char(t, p, &len);
    return !g->ignore_merges && !bsearch(&c, g->cross, g->n_cross, sizeof c, cmp_u32) &&
           sn_bpe_find(g, t + p - len, len) >= 0 && sn_bpe_find(g, SP, 3) >= 0;
}

/* Encodes one piece of text (between special tokens; at the text's start when first): its
 * spaces as SP, SP before it as sp.prepend says, then each word: from each SP on when sp.split;
 * else the whole, cut only where that changes no id (sp_cut_ok), as a long text is one word. */
sn_status sn_bpe_sp_encode_piece(gpt2 *g, const char *s, size_t n, bool first, sn_tokens *out,
                                 sn_err *e) {
    if (n == 0) return SN_OK;
    if (3 * n + 3 > g->norm_cap) {
        if (!sn_bpe_resize(&g->norm, 6 * n + 6)) return sn_fail_oom(e, 6 * n + 6, "the BPE tokenizer's text buffer");
        g->norm_cap = 6 * n + 6;
    }
    char *t = g->norm;
    size_t m = 0;
    bool starts_sp = s[0] == ' ' || (n >= 3 && !memcmp(s, SP, 3));
    sn_sp_prepend pre = g->sp.prepend;
    if (pre == SN_SP_PREPEND_EACH || (pre == SN_SP_PREPEND_MISSING && !starts_sp) ||
        (pre == SN_SP_PREPEND_FIRST && first && !starts_sp)) {
        memcpy(t, SP, 3);
        m = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ') t[m++] = s[i];
        else memcpy(t + m, SP, 3), m += 3;
    }
    for (size_t i = 0; i < m;) {
        size_t j = m;
        for (size_t from = i + 1; from < m;) { /* up to the next SP after i where it may be cut */
            const char *nx = memmem(t + from, m - from, SP, 3);
            j = nx ? (size_t)(nx - t) : m;
            if (!nx || g->sp.split || sp_cut_ok(g, t, j)) break;
            from = j + 3;
            j = m;
        }
        uint32_t count;
        const int32_t *ids = sn_bpe_encode_word(g, t + i, j - i, &count);
        if (!ids) return sn_fail_oom(e, 16 * (j - i) + 4096, "the BPE tokenizer's word buffers");
        for (uint32_t k = 0; k < count; k++) {
            sn_status st = sn_tokens_push(out, ids[k], e);
            if (st) return st;
        }
        i = j;
    }
    return SN_OK;
}

/* "<0xHH>" as Hugging Face's ByteFallback decoder reads it: its byte, else -1. */
static int hex_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        int c = (unsigned char)s[k], lc = c | 0x20;
        int d = c >= '0' && c <= '9' ? c - '0' : lc >= 'a' && lc <= 'f' ? lc - 'a' + 10
              : k == 3 && c == '+' ? 0 : -1; /* Rust's from_str_radix takes a sign */
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Each token's decoded bytes: the decoder's Replace and ByteFallback applied to it alone. */
sn_status sn_bpe_sp_decoded(sn_bpe *g, sn_err *e) {
    size_t nv = (size_t)g->tk.vocab;
    if (!sn_bpe_resize(&g->dpool, g->pool_len + 1) || !sn_bpe_resize(&g->dtok, nv * sizeof *g->dtok) ||
        !sn_bpe_resize(&g->dbyte, nv * sizeof *g->dbyte))
        return sn_bpe_tables_oom(g, e, g->pool_len + nv * (sizeof *g->dtok + sizeof *g->dbyte));
    size_t used = 0;
    for (size_t id = 0; id < nv; id++) {
        const char *s = g->pool + g->tok[id].off;
        size_t n = g->tok[id].len, at = used;
        int b = g->sp.dec_bytes ? hex_token(s, n) : -1;
        g->dbyte[id] = (int16_t)b;
        if (b >= 0) g->dpool[used++] = (char)b;
        for (size_t i = 0; i < n && b < 0; i++) {
            if (g->sp.dec_replace && i + 3 <= n && !memcmp(s + i, SP, 3)) g->dpool[used++] = ' ', i += 2;
            else g->dpool[used++] = s[i];
        }
        g->dtok[id] = (span){(uint32_t)at, (uint32_t)(used - at)};
    }
    return SN_OK;
}

/* Whether s[0, n) is UTF-8 as Rust's String::from_utf8 takes it (no overlong forms, surrogates
 * or code points past U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return false;
        unsigned c1 = k > 1 ? s[i + 1] : 0;
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) ||
            (c == 0xf4 && c1 > 0x8f))
            return false;
        i += k;
    }
    return true;
}

/* The text of t[start, start+n) (ids checked by the caller) as Hugging Face decodes it: each
 * token's bytes, a run of byte tokens that is not UTF-8 as one U+FFFD a byte, then the Strip. */
sn_status sn_bpe_sp_decode_text(const sn_tokenizer *tk, const sn_tokens *t, size_t start,
                                size_t n, char **text, size_t *len, sn_err *e) {
    const gpt2 *g = tk->impl;
    size_t cap = 1; /* the text's bound, then the run of byte tokens' bytes */
    for (size_t i = 0; i < n; i++) {
        int32_t id = sn_tokens_get(t, start + i);
        cap += g->dbyte[id] >= 0 ? 3 : g->dtok[id].len; /* a byte may become U+FFFD */
    }
    char *out = malloc(cap + n), *run = out + cap;
    if (!out) return sn_fail(e, SN_ERR_OOM, "out of memory decoding %zu tokens", n);
    size_t used = 0, nrun = 0;
    for (size_t i = 0; i <= n; i++) {
        int32_t id = i < n ? sn_tokens_get(t, start + i) : -1;
        if (id >= 0 && g->dbyte[id] >= 0) {
            run[nrun++] = (char)g->dbyte[id];
            continue;
        }
        if (nrun && utf8_valid((const unsigned char *)run, nrun)) {
            memcpy(out + used, run, nrun);
            used += nrun;
        } else {
            for (size_t k = 0; k < nrun; k++) memcpy(out + used, "\xef\xbf\xbd", 3), used += 3;
        }
        nrun = 0;
        if (id < 0) break;
        const char *tok = g->pool + g->tok[id].off;
        size_t tlen = g->tok[id].len;
        for (size_t k = 0; i == 0 && g->sp.dec_first_sp && k < tlen; k++) { /* Metaspace's */
            if (k + 3 <= tlen && !memcmp(tok + k, SP, 3)) k += 2;
            else out[used++] = tok[k];
        }
        if (i == 0 && g->sp.dec_first_sp) continue;
        memcpy(out + used, g->dpool + g->dtok[id].off, g->dtok[id].len);
        used += g->dtok[id].len;
    }
    size_t a = 0, b = used;
    for (int k = 0; k < g->sp.strip_start && a < b && out[a] == ' '; k++) a++;
    for (int k = 0; k < g->sp.strip_stop && b > a && out[b - 1] == ' '; k++) b--;
    memmove(out, out + a, b - a);
    out[b - a] = 0;
    *text = out;
    *len = b - a;
    return SN_OK;
}
