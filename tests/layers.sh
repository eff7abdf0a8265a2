#!/bin/sh
# layers.sh: the include graph between folders follows the layer order of README.md ("Layout"):
# a file includes only headers of its own folder or of folders earlier in the list below.
# Fails naming the file and the header that break the order.
set -u
cd "$(dirname "$0")/.."
order="ir support frontend program passes interp codegen/llvm codegen/cuda sim runtime data train models api cli bench examples/llama tests"
rank() { [ "$1" = runtime/cuda ] && set -- runtime   # runtime/cuda is part of the runtime layer
  i=0; for l in $order; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i+1)); done; echo -1; }
bad=0
for f in $(find $order runtime/cuda -maxdepth 1 \( -name '*.[ch]' -o -name '*.cc' \) 2>/dev/null | sort -u); do
  dir=$(dirname "$f"); rd=$(rank "$dir")
  [ "$rd" -ge 0 ] || { echo "layers: $f is in a folder outside the layer list (tests/layers.sh)"; bad=1; continue; }
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$f"); do
    d=$(dirname "$inc"); ri=$(rank "$d")
    if [ "$ri" -lt 0 ] || { [ "$ri" -gt "$rd" ]; }; then
      echo "layers: $f includes $inc: $d is not below $dir"; bad=1
    elif [ "$ri" -eq "$rd" ] && [ "$d" = "$dir" ]; then
      echo "layers: $f includes $inc by path: include headers of its own folder by name"; bad=1
    fi
  done
done
[ $bad -eq 0 ] && echo "layers: the include graph follows: $order"
exit $bad
