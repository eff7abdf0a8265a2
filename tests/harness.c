/* harness.c: see harness.h. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int sn_test_main(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void sn_check_close(const char *what, const double *got, const double *want, size_t n,
                    double tol, double floor) {
    double scale = floor, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]) / scale;
        if (!(err <= worst)) { /* NaN propagates as a failure */
            worst = err;
            at = i;
            if (isnan(err)) break;
        }
    }
    ck_assert_msg(worst <= tol, "%s: normalized error %.3g > %.3g at [%zu]: got %.9g, want %.9g",
                  what, worst, tol, at, n ? got[at] : 0.0, n ? want[at] : 0.0);
}

const char *sn_shared_data(const char *name) {
    static char buf[4096];
    const char *root = getenv("SN_SHARED");
    snprintf(buf, sizeof buf, "%s/data/%s", root ? root : "../shared", name);
    return buf;
}
