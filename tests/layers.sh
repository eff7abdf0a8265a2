#!/bin/sh
# layers.sh: the include graph between folders follows the layer order of README.md ("Layout"):
# a file includes only headers of its own folder or of folders earlier in the list below.
# Fails naming the file and the header that break the order. One awk reads every file (a
# process per file is slow on a loaded machine, and slower under tools/sanitize's preload).
set -u
cd "$(dirname "$0")/.."
order="base ir support frontend program passes interp codegen/llvm codegen/cuda sim runtime data train models io api cli examples/llama bench tests"
find $order runtime/cuda -maxdepth 1 \( -name '*.[ch]' -o -name '*.cc' \) 2>/dev/null | sort -u |
awk -v order="$order" '
function dir(p) { sub(/\/[^\/]*$/, "", p); return p }
function rank(d) { if (d == "runtime/cuda") d = "runtime"   # runtime/cuda is part of the runtime layer
  return (d in r) ? r[d] : -1 }
BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) r[o[i]] = i - 1; bad = 0 }
{ files[++nf] = $0 }
END {
  for (k = 1; k <= nf; k++) {
    f = files[k]; d = dir(f); rd = rank(d)
    if (rd < 0) { print "layers: " f " is in a folder outside the layer list (tests/layers.sh)"; bad = 1; continue }
    while ((getline line < f) > 0) {
      if (line !~ /^[ \t]*#[ \t]*include[ \t]*"[^"]*\/[^"]*"/) continue
      inc = line; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
      di = dir(inc); ri = rank(di)
      if (ri < 0 || ri > rd) { print "layers: " f " includes " inc ": " di " is not below " d; bad = 1 }
      else if (ri == rd && di == d) { print "layers: " f " includes " inc " by path: include headers of its own folder by name"; bad = 1 }
    }
    close(f)
  }
  if (!bad) print "layers: the include graph follows: " order
  exit bad
}'
