#!/bin/sh
# llama_out_of_tree.sh: the installed library as a user gets it: `meson install --destdir` of the
# build under test into a staging directory, then examples/llama (copied alone out of the tree)
# built by its Makefile with only the staged sinter.pc, trained for a few steps on
# tinyshakespeare (byte-level): the loss must fall, and the versions must agree; a program that
# reads a field of the opaque graph must not compile; then linked
# statically with libsinter.a and run for two steps; and the example at the top of sinter.h.
# usage: llama_out_of_tree.sh BUILD_DIR EXAMPLE_DIR CORPUS [CC SANITIZE]: with SANITIZE (meson's
# b_sanitize, e.g. address,undefined; "none" for none) the programs are built by CC with
# -fsanitize=SANITIZE, as a program linking a sanitized libsinter must be (tools/sanitize).
set -eu
build=$1 example=$2 corpus=$3
cc=cc san=
if [ "${5:-none}" != none ]; then cc=$4 san=-fsanitize=$5; fi
[ -f "$corpus" ] || { echo "SKIP: no corpus $corpus"; exit 77; }
command -v make >/dev/null || { echo "SKIP: no make"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

meson install -C "$build" --destdir "$dir/stage" --no-rebuild --quiet >"$dir/install.log" 2>&1 ||
  { echo "FAIL: meson install"; cat "$dir/install.log"; exit 1; }
pc=$(find "$dir/stage" -name sinter.pc)
[ -n "$pc" ] || { echo "FAIL: no sinter.pc installed"; find "$dir/stage"; exit 1; }
for h in sinter.h session.h frontend/sinter.h frontend/lora.h base/graph.h; do
  [ -n "$(find "$dir/stage" -path "*/include/sinter/$h")" ] || { echo "FAIL: $h not installed"; exit 1; }
done
# The IR stays inside: a program sees the graph and its nodes only through functions.
[ -z "$(find "$dir/stage" -path '*/include/sinter/ir*')" ] || { echo "FAIL: the IR's headers are installed"; find "$dir/stage" -path '*/include/sinter/ir*'; exit 1; }
so=$(find "$dir/stage" -name 'libsinter.so.*.*.*')
[ -n "$so" ] && [ -n "$(find "$dir/stage" -name libsinter.a)" ] || { echo "FAIL: libsinter.so/.a"; exit 1; }
readelf -d "$so" | grep -q 'SONAME.*\[libsinter\.so\.0\]' || { echo "FAIL: soname"; readelf -d "$so"; exit 1; }
# GPT-2's tokenizer beside the installed sinter (bin/../share/sinter/gpt2: cli/tokenizer.c)
bin=$(find "$dir/stage" -path '*/bin/sinter')
for f in encoder.json vocab.bpe LICENSE; do
  [ -f "$(dirname "$bin")/../share/sinter/gpt2/$f" ] || { echo "FAIL: share/sinter/gpt2/$f not installed beside $bin"; exit 1; }
done

# Only the staged pkg-config file: its paths rebased on the staging directory.
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_LIBDIR="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$dir/stage"
cp -r "$example" "$dir/llama"
make -s -C "$dir/llama" CC="$cc" CFLAGS="-O2 -g $san" >"$dir/make.log" 2>&1 || { echo "FAIL: make"; cat "$dir/make.log"; exit 1; }
export LD_LIBRARY_PATH="$(dirname "$so")"
ldd "$dir/llama/llama" | grep -q "libsinter.so.0 => $dir/stage" || { echo "FAIL: not linked to the staged library"; ldd "$dir/llama/llama"; exit 1; }

"$dir/llama/llama" --data "$corpus" --device cpu --steps 30 --batch 4 --seq 64 --layers 2 --lr 3e-3 \
  --every 5 --checkpoint "$dir/run.ckpt" --sample 40 >"$dir/out" 2>&1 ||
  { echo "FAIL: llama"; cat "$dir/out"; exit 1; }
cat "$dir/out"
version=$(pkg-config --modversion sinter)
grep -q "sinter $version\$" "$dir/out" || { echo "FAIL: version: pkg-config says $version"; exit 1; }
first=$(sed -n 's/^step 1 loss \([0-9.]*\).*/\1/p' "$dir/out")
last=$(sed -n 's/^step 30 loss \([0-9.]*\).*/\1/p' "$dir/out")
[ -n "$first" ] && [ -n "$last" ] || { echo "FAIL: no losses"; exit 1; }
# byte-level: about ln 256 = 5.55 at the start; 30 steps must take it well below
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5 && b < a - 1.0) }' ||
  { echo "FAIL: the loss did not fall: $first -> $last"; exit 1; }
[ -s "$dir/run.ckpt" ] || { echo "FAIL: no checkpoint"; exit 1; }
grep -q -- "---- sample ----" "$dir/out" || { echo "FAIL: no sample"; exit 1; }

# The example at the top of the installed sinter.h, as a reader would copy it.
awk '/^ \*     #include <stdio.h>/{on=1} on{l=$0; sub(/^ \*( {5})?/, "", l); print l}
     on&&/sn_session_free/{getline; sub(/^ \*( {5})?/, ""); print; exit}' "$(find "$dir/stage" -path '*/include/sinter/sinter.h')" >"$dir/first.c"
"$cc" $san -std=c11 $(pkg-config --cflags sinter) -o "$dir/first" "$dir/first.c" $(pkg-config --libs sinter) >"$dir/first.log" 2>&1 ||
  { echo "FAIL: the example in sinter.h does not build"; cat "$dir/first.c" "$dir/first.log"; exit 1; }
(cd "$dir" && ./first "$corpus" >"$dir/first.out" 2>&1) && grep -q "^loss [0-9.]*, val [0-9.]*$" "$dir/first.out" ||
  { echo "FAIL: the example in sinter.h"; cat "$dir/first.out"; exit 1; }
grep "^loss" "$dir/first.out"

# The graph and its nodes are opaque: a program that reads a field does not compile, and the
# same program through the calls does (and reads the first error back by a call).
cat >"$dir/opaque.c" <<'END'
#include <sinter.h>
int main(void) {
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_param(g, "a", SN_F32, SN_SHAPE(3, 4), SN_INIT_ZEROS, 0);
#ifdef FIELD
    return a->rank + g->n_nodes;
#else
    sn_matmul(g, a, a);
    int ok = sn_graph_status(g) == SN_ERR_SHAPE && sn_node_dim(a, -1) == 4 && sn_graph_error(g);
    sn_graph_free(g);
    return !ok;
#endif
}
END
! "$cc" -std=c11 -DFIELD $(pkg-config --cflags sinter) -c -o "$dir/opaque.o" "$dir/opaque.c" >"$dir/opaque.log" 2>&1 ||
  { echo "FAIL: a program outside the tree reads a field of sn_graph or sn_node"; exit 1; }
grep -q "incomplete" "$dir/opaque.log" || { echo "FAIL: opaque.c failed for another reason"; cat "$dir/opaque.log"; exit 1; }
"$cc" $san -std=c11 $(pkg-config --cflags sinter) -o "$dir/opaque" "$dir/opaque.c" $(pkg-config --libs sinter) >"$dir/opaque.log" 2>&1 &&
  "$dir/opaque" || { echo "FAIL: the same program through the calls"; cat "$dir/opaque.log"; exit 1; }

# The static library: the same program linked with libsinter.a and the private libraries sinter.pc
# names (the prefix moved to the staging directory: a sysroot would also move the toolkit's paths).
unset PKG_CONFIG_SYSROOT_DIR
P="pkg-config --define-variable=prefix=$dir/stage$(sed -n 's/^prefix=//p' "$pc")"
"$cc" $san -std=c11 $($P --cflags sinter) -o "$dir/llama/llama-static" "$dir/llama/main.c" "$dir/llama/llama.c" \
  -Wl,-Bstatic $($P --libs-only-L sinter) -lsinter -Wl,-Bdynamic $($P --static --libs sinter | sed 's/-lsinter//') -lm \
  >"$dir/static.log" 2>&1 || { echo "FAIL: static link"; cat "$dir/static.log"; exit 1; }
! ldd "$dir/llama/llama-static" | grep -q libsinter || { echo "FAIL: llama-static loads libsinter.so"; exit 1; }
"$dir/llama/llama-static" --data "$corpus" --device interp --steps 2 --batch 1 --seq 8 --layers 1 --sample 4 \
  >"$dir/static.out" 2>&1 || { echo "FAIL: llama-static"; cat "$dir/static.out"; exit 1; }
grep -q "^step 2 loss" "$dir/static.out" || { echo "FAIL: llama-static"; cat "$dir/static.out"; exit 1; }
echo "llama out of tree: loss $first -> $last in 30 steps (shared library); the static library links and runs"
