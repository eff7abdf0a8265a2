#!/bin/sh
# alloc.sh: no library or CLI code asserts on an allocation's result: running out of memory is
# a status (SN_ERR_OOM, ir/alloc.c's sn_malloc and friends), never an abort. Flags an SN_ASSERT
# that names a variable assigned from malloc, calloc, realloc, strdup or aligned_alloc within
# the 12 lines before it, and any abort() outside the assertion handler.
set -u
cd "$(dirname "$0")/.."
files=$(find ir support frontend program passes interp codegen runtime data train models api cli -name '*.c' | sort)
bad=$(awk '
FNR == 1 { n = 0 }
{
    line = $0
    while (match(line, /[A-Za-z_][A-Za-z_0-9]*(\[[^]]*\])?[ \t]*=[ \t]*(\([^()]*\)[ \t]*)?(malloc|calloc|realloc|strdup|aligned_alloc)[ \t]*\(/)) {
        lhs = substr(line, RSTART, RLENGTH)
        sub(/[ \t]*=.*/, "", lhs)
        sub(/\[.*/, "", lhs)
        n++
        var[n] = lhs
        at[n] = FNR
        line = substr(line, RSTART + RLENGTH)
    }
    if ($0 ~ /SN_ASSERT\(/) {
        cond = $0
        sub(/.*SN_ASSERT\(/, "", cond)
        for (i = n; i >= 1 && FNR - at[i] <= 12; i--)
            if (match(cond, "(^|[^A-Za-z_0-9])" var[i] "([^A-Za-z_0-9]|$)")) {
                print FILENAME ":" FNR ": asserts on the allocation of " var[i] " (line " at[i] "): " $0
                break
            }
    }
    if ($0 ~ /abort\(\)/ && FILENAME != "ir/graph.c") print FILENAME ":" FNR ": abort(): " $0
}' $files)
if [ -n "$bad" ]; then
    echo "$bad"
    echo "FAIL: report out of memory as a status (sn_malloc / sn_calloc / sn_realloc, or sn_fail_oom)"
    exit 1
fi
echo "no allocation asserted on in $(echo "$files" | wc -l) files"
