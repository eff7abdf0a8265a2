#!/bin/sh
# cudadev_cli.sh SINTER: the --device choice on a machine without a GPU: `--device cuda` is a clear
# error (exit 1, "no CUDA device (...)"), a plain `sinter train` (--device auto) says in one line
# that it uses the CPU and trains, and `sinter info` names why there is no CUDA device.
set -eu
sinter=$1
if "$sinter" info | grep -q "^  device 0: "; then echo "a CUDA device is present: nothing to check here"; exit 77; fi
"$sinter" info | grep -q "^cuda:       no CUDA device (" || { echo "FAIL: info"; "$sinter" info; exit 1; }
dir=$(mktemp -d /tmp/sn_cudadev_XXXXXX)
trap 'rm -rf "$dir"' EXIT
seq 1 400 | awk '{ print "line " $1 }' > "$dir/corpus.txt"
tiny="--model tiny --data $dir/corpus.txt --batch 2 --seq 16 --steps 2 --sample-len 0"
status=0
# shellcheck disable=SC2086
"$sinter" train $tiny --device cuda > "$dir/cuda.out" 2>&1 || status=$?
[ "$status" = 1 ] || { echo "FAIL: --device cuda exit status $status"; cat "$dir/cuda.out"; exit 1; }
grep -q "no CUDA device (.*use --device cpu" "$dir/cuda.out" || { echo "FAIL: message"; cat "$dir/cuda.out"; exit 1; }
# shellcheck disable=SC2086
"$sinter" train $tiny --no-cache > "$dir/auto.out" 2>&1
[ "$(head -1 "$dir/auto.out")" = "no CUDA device (libcuda.so.1 not found): using cpu" ] || { echo "FAIL: auto"; cat "$dir/auto.out"; exit 1; }
grep -q "^step  *2/2" "$dir/auto.out" || { echo "FAIL: auto did not train"; cat "$dir/auto.out"; exit 1; }
# a library named by SN_LIBCUDA that is not there
status=0
# shellcheck disable=SC2086
SN_LIBCUDA=/nonexistent/libsn_standin_cuda.so "$sinter" train $tiny --device cuda > "$dir/env.out" 2>&1 || status=$?
[ "$status" = 1 ] && grep -q "/nonexistent/libsn_standin_cuda.so" "$dir/env.out" || { echo "FAIL: SN_LIBCUDA"; cat "$dir/env.out"; exit 1; }
echo "--device cuda without a GPU: a clear error; --device auto: cpu, in one line: ok"
