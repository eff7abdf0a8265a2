/* bench_json.c: the benches' JSON records through json-c (bench_json.h); without json-c, a
 * note on stderr in place of every record. */
#include "bench_json.h"

#include <math.h>

#ifdef SN_HAVE_JSONC
#include <json-c/json.h>

#ifndef JSON_C_TO_STRING_NOSLASHESCAPE
#define JSON_C_TO_STRING_NOSLASHESCAPE 0
#endif

bj *bj_new(void) { return json_object_new_object(); }

static bj *set(bj *o, const char *key, bj *v) {
    if (o) json_object_object_add(o, key, v);
    else json_object_put(v);
    return o ? v : NULL;
}

bj *bj_obj(bj *o, const char *key) { return set(o, key, json_object_new_object()); }
bj *bj_arr(bj *o, const char *key) { return set(o, key, json_object_new_array()); }

bj *bj_push_obj(bj *arr) {
    bj *v = json_object_new_object();
    if (arr && v && json_object_array_add(arr, v) == 0) return v;
    json_object_put(v);
    return NULL;
}

void bj_str(bj *o, const char *key, const char *v) { set(o, key, v ? json_object_new_string(v) : NULL); }

void bj_char(bj *o, const char *key, char c) {
    char s[2] = {c, 0};
    bj_str(o, key, s);
}

void bj_int(bj *o, const char *key, long long v) { set(o, key, json_object_new_int64(v)); }
void bj_bool(bj *o, const char *key, bool v) { set(o, key, json_object_new_boolean(v)); }
void bj_null(bj *o, const char *key) { set(o, key, NULL); }

void bj_num(bj *o, const char *key, const char *fmt, double v) {
    if (!isfinite(v)) {
        bj_null(o, key);
        return;
    }
    char text[64];
    snprintf(text, sizeof text, fmt, v);
    set(o, key, json_object_new_double_s(v, text));
}

void bj_print(bj *o, FILE *f) {
    if (!o) return;
    fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
    fflush(f);
    json_object_put(o);
}

#else /* no json-c: no records */

bj *bj_new(void) { return NULL; }
bj *bj_obj(bj *o, const char *key) { (void)o, (void)key; return NULL; }
bj *bj_arr(bj *o, const char *key) { (void)o, (void)key; return NULL; }
bj *bj_push_obj(bj *arr) { (void)arr; return NULL; }
void bj_str(bj *o, const char *key, const char *v) { (void)o, (void)key, (void)v; }
void bj_char(bj *o, const char *key, char c) { (void)o, (void)key, (void)c; }
void bj_int(bj *o, const char *key, long long v) { (void)o, (void)key, (void)v; }
void bj_bool(bj *o, const char *key, bool v) { (void)o, (void)key, (void)v; }
void bj_num(bj *o, const char *key, const char *fmt, double v) { (void)o, (void)key, (void)fmt, (void)v; }
void bj_null(bj *o, const char *key) { (void)o, (void)key; }

void bj_print(bj *o, FILE *f) {
    (void)o, (void)f;
    static bool said; /* once a process: the note is the same each time */
    if (!said)
        fprintf(stderr, "bench: built without json-c, so no JSON record is written: install "
                "libjson-c-dev and configure again (meson setup --reconfigure)\n");
    said = true;
}

#endif
