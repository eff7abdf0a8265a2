/* bench_json.h: the benches' records, one JSON object a line, built and written through json-c
 * (SN_HAVE_JSONC). Convention: a number keeps the text of its printf format ("%.2f"), as the
 * printf lines these records replace wrote it; a number that is not finite is null. Without
 * json-c every call does nothing and bj_print says once, on stderr, that no record is written.
 *
 *     bj *r = bj_new();
 *     bj_str(r, "bench", "train");
 *     bj_num(r, "ms_per_step", "%.2f", 1e3 * s);
 *     bj_print(r, stdout);   // {"bench":"train","ms_per_step":12.34}; frees r
 */
#ifndef SN_BENCH_JSON_H
#define SN_BENCH_JSON_H

#include <stdbool.h>
#include <stdio.h>

typedef struct json_object bj; /* json-c's object; NULL without json-c */

bj *bj_new(void);                              /* an empty object */
bj *bj_obj(bj *o, const char *key);            /* a new object set at key, returned */
bj *bj_arr(bj *o, const char *key);            /* a new array set at key, returned */
bj *bj_push_obj(bj *arr);                      /* a new object appended to arr, returned */
void bj_str(bj *o, const char *key, const char *v);           /* NULL: null */
void bj_char(bj *o, const char *key, char c);                 /* a string of one character */
void bj_int(bj *o, const char *key, long long v);
void bj_bool(bj *o, const char *key, bool v);
void bj_num(bj *o, const char *key, const char *fmt, double v); /* fmt: one printf conversion */
void bj_null(bj *o, const char *key);
/* Writes o as one line ("key":value, no spaces) to f, flushes f, and frees o. */
void bj_print(bj *o, FILE *f);

#endif
