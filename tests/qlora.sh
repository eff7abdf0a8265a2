#!/bin/sh
# qlora.sh SINTER CUDA NVRTC CUBLASLT FIXTURES: QLoRA from the command line (issue 25). A base
# run's checkpoint starts a QLoRA run (--init base.ckpt --qlora 4: its weights quantized into the
# NF4 base), which trains and samples; interrupted by SIGINT and resumed it ends with the
# checkpoint of the run that was not (bit for bit, same losses); a LoRA resume of it is refused;
# --mem's plan is what the device holds; on the stand-in CUDA driver it has the CPU device's
# losses; export merges its adapters into the dequantized base and generate reads it; --init-hf
# quantizes a pretrained LLaMA; in fp16 (the base unpacked to f16, the loss scaled) the stand-in
# has the CPU device's losses too; --qlora with --lora or --ia3 is refused.
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
standin_cuda=$2 standin_nvrtc=$3 standin_cublaslt=$4 fixtures=$5
dir=$(mktemp -d /tmp/sn_qlora_XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -KILL $pid 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -n 8 $f; }; done; exit 1; }
seq 1 3000 | awk '{ print "line " $1 ": the quick brown fox jumps over " ($1 * 7) % 13 " lazy dogs" }' > corpus.txt
common="--model tiny --data corpus.txt --batch 2 --seq 16 --sample-len 0 --eval-every 0"
losses() { cut -d, -f1-5 "$1"; } # step,loss,val_loss,lr,grad_norm (tokens/s differ)

# shellcheck disable=SC2086
"$sinter" train $common --steps 30 --lr 3e-3 --device cpu --checkpoint base.ckpt > out.txt 2> err.txt || fail "base run"

# a QLoRA run from it, straight through, with a sample at the end (the sampler reads the NF4 bytes)
steps=40
qlora="$common --steps $steps --lr 3e-3 --init base.ckpt --qlora 4 --lora-alpha 8 --precision bf16 --save-every 15"
# shellcheck disable=SC2086
"$sinter" train $qlora --device cpu --log straight.csv --checkpoint straight.ckpt --sample-len 8 > out.txt 2> err.txt || fail "QLoRA run"
grep -q "^initialised from base.ckpt (its weights; 16 LoRA adapter parameters it lacks start as usual" out.txt || fail "no init line"
grep -q "^QLoRA: rank 4, alpha 8 (scale 2), on all: 4096 of 38784 parameters trained (10.56%), the rest frozen; the targeted layers' weights stored as NF4" out.txt ||
    fail "no QLoRA line"
grep -q "^---- sample at step $steps" out.txt || fail "no sample"
[ "$(tail -n 1 straight.csv | cut -d, -f1)" = $steps ] || fail "the QLoRA run's log"
awk -F, 'NR == 2 { first = $2 } END { exit !($2 < first) }' straight.csv || fail "the loss did not fall"

# interrupted by SIGINT after its first save (held there: SN_TRAIN_PAUSE_AFTER), resumed: the
# same end, bit for bit
rm -f pidfile
# shellcheck disable=SC2086
SN_TRAIN_PAUSE_AFTER=18 sh -c 'echo $$ > pidfile; exec "$@"' sh "$sinter" train $qlora --device cpu --log run.csv --checkpoint run.ckpt > out.txt 2> err.txt &
while [ ! -s pidfile ]; do sleep 0.01; done
pid=$(cat pidfile)
last_step() { [ -s run.csv ] && tail -n 1 run.csv | cut -d, -f1 | grep -x '[0-9]*' || echo 0; }
while [ "$(last_step)" -lt 18 ]; do
    kill -0 "$pid" 2>/dev/null || fail "the run ended before it was interrupted"
    sleep 0.005
done
kill -INT "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" = 130 ] || fail "exit status $status after SIGINT, not 130"
at=$(sed -n 's/^stopped by SIGINT after step \([0-9]*\) of.*/\1/p' out.txt)
[ -n "$at" ] && [ "$at" -lt $steps ] || fail "stopped at step '$at'"
# shellcheck disable=SC2086
"$sinter" train $qlora --device cpu --log run.csv --resume run.ckpt > out.txt 2> err.txt || fail "resume"
grep -q "^resumed from run.ckpt at step $at$" out.txt || fail "not resumed at step $at"
losses straight.csv > straight.cut
losses run.csv > run.cut
cmp straight.cut run.cut || { diff straight.cut run.cut | head; fail "losses differ after resume"; }
cmp straight.ckpt run.ckpt || fail "final checkpoints differ after resume"
echo "QLoRA interrupted at step $at and resumed: the same losses and final checkpoint"

# resuming it as a LoRA run (a full-precision base) is refused, saying what to do
status=0
# shellcheck disable=SC2086
"$sinter" train $common --steps $steps --lr 3e-3 --lora 4 --lora-alpha 8 --precision bf16 --save-every 15 --device cpu \
    --resume straight.ckpt > out.txt 2> err.txt || status=$?
[ "$status" = 1 ] && grep -q "it was saved by a QLoRA (NF4 base) run and this one is not: resume with --qlora R" err.txt ||
    fail "a LoRA resume of a QLoRA checkpoint ($status)"

# --mem: the plan's total is what the device holds after the first step
# shellcheck disable=SC2086
"$sinter" train $common --steps 2 --qlora 4 --precision bf16 --device cpu --mem 2MiB > out.txt 2> err.txt || fail "--mem"
line=$(grep "^memory: planned" out.txt) || fail "no memory line"
planned=$(echo "$line" | sed 's/.*planned [^(]*(\([0-9]*\) bytes).*/\1/')
measured=$(echo "$line" | sed 's/.*measured [^(]*(\([0-9]*\) bytes.*/\1/')
[ "$planned" = "$measured" ] || fail "QLoRA planned $planned bytes, measured $measured"

# the stand-in CUDA driver against the CPU device
short="$common --steps 4 --lr 3e-3 --init base.ckpt --qlora 4"
# shellcheck disable=SC2086
"$sinter" train $short --device cpu --log cpu.csv > out.txt 2> err.txt || fail "short run"
# shellcheck disable=SC2086
XDG_CACHE_HOME="$dir/cache" SN_LIBCUDA="$standin_cuda" SN_LIBNVRTC="$standin_nvrtc" SN_LIBCUBLASLT="$standin_cublaslt" \
    "$sinter" train $short --device cuda --precision fp32 --log cuda.csv > out.txt 2> err.txt || fail "the stand-in CUDA device"
grep -q "^device: cuda 0: sinter stand-in driver" out.txt || fail "not the stand-in"
awk -F, 'NR == FNR { l[$1] = $2; next } FNR > 1 { d = $2 - l[$1]; if (d < 0) d = -d; if (d > 1e-5 * l[$1]) bad = 1 }
         END { exit bad }' cpu.csv cuda.csv || { paste -d' ' cpu.csv cuda.csv; fail "the stand-in's losses differ"; }
echo "QLoRA on the stand-in CUDA device: the CPU device's losses within 1e-5"

# export: the adapters merged into the dequantized base
"$sinter" export straight.ckpt --to hf > out.txt 2> err.txt || fail "export"
grep -q "adapters merged" out.txt || fail "export did not merge"
# generate: the base NF4 on the device (the default for up to 8 prompts, --base nf4), or
# dequantized to f32 (--base f32; the CPU's default for more prompts): the same greedy text
"$sinter" generate straight.ckpt -n 12 -t 0 --device cpu --base nf4 > nf4.txt 2> err.txt || fail "generate --base nf4"
grep -q ", the base NF4;" err.txt || fail "generate --base nf4 did not keep the base NF4"
"$sinter" generate straight.ckpt -n 12 -t 0 --device cpu --base f32 > f32.txt 2> err.txt || fail "generate --base f32"
grep -q "the base NF4" err.txt && fail "--base f32 kept the base NF4"
"$sinter" generate straight.ckpt -n 12 -t 0 --device cpu --base bf16 > b16.txt 2> err.txt || fail "generate --base bf16"
grep -q ", the linear weights bf16;" err.txt || { cat err.txt; fail "--base bf16 of a QLoRA checkpoint"; }
cmp nf4.txt f32.txt || fail "the NF4 and f32 bases generate different greedy text"
"$sinter" generate straight.ckpt -n 2 -t 0 --device cpu > out.txt 2> err.txt || fail "generate"
grep -q ", the base NF4;" err.txt || fail "the CPU's default base for one prompt is not NF4"
"$sinter" generate straight.ckpt -n 2 -t 0 --device cpu -p a -p b -p c -p d -p e -p f -p g -p h \
    -p i > out.txt 2> err.txt || fail "generate 9 prompts"
grep -q "the base NF4" err.txt && fail "the CPU's default base for 9 prompts is NF4"
if "$sinter" generate base.ckpt -n 2 --base nf4 > out.txt 2> err.txt; then fail "--base of a checkpoint without NF4"; fi
grep -q "has no NF4 base" err.txt || { cat err.txt; fail "--base's refusal"; }
XDG_CACHE_HOME="$dir/cache" SN_LIBCUDA="$standin_cuda" SN_LIBNVRTC="$standin_nvrtc" SN_LIBCUBLASLT="$standin_cublaslt" \
    "$sinter" generate straight.ckpt -n 12 -t 0 --device cuda > cuda.txt 2> err.txt || fail "generate on the stand-in"
grep -q ", the base NF4;" err.txt || fail "a GPU's default base is not NF4"
cmp nf4.txt cuda.txt || fail "the stand-in CUDA device's NF4 base generates another greedy text"
echo "QLoRA generate: the base NF4 (the default up to 8 prompts) and f32: the same greedy text"

# --init-hf: a pretrained LLaMA quantized into the NF4 base
"$sinter" train --init-hf "$fixtures/llama/llama" --qlora 4 --data corpus.txt --batch 2 --seq 16 --steps 2 \
    --device cpu --sample-len 0 --eval-every 0 > out.txt 2> err.txt || fail "--init-hf with --qlora"
grep -q "^QLoRA: rank 4" out.txt || fail "no QLoRA line for --init-hf"

# refusals
for bad in "--lora 4|--qlora R is --lora R over an NF4 base: give one of them" \
           "--ia3|--qlora trains LoRA adapters over an NF4 base, --ia3 IA3 vectors: choose one"; do
    status=0
    # shellcheck disable=SC2086
    "$sinter" train $common --qlora 4 ${bad%%|*} > out.txt 2> err.txt || status=$?
    [ "$status" = 2 ] && grep -qF -e "${bad#*|}" err.txt || fail "--qlora with ${bad%%|*} ($status)"
done
echo "QLoRA: export, generate, --init-hf; --lora and --ia3 with it refused by name"

# fp16: the CPU device and the stand-in CUDA driver (each dequantize kernel writing f16)
# shellcheck disable=SC2086
"$sinter" train $short --precision fp16 --device cpu --log cpu16.csv > out.txt 2> err.txt || fail "fp16 QLoRA"
grep -q "^loss scale 65536, 0 steps skipped" out.txt || fail "no loss scaling in fp16"
# shellcheck disable=SC2086
XDG_CACHE_HOME="$dir/cache" SN_LIBCUDA="$standin_cuda" SN_LIBNVRTC="$standin_nvrtc" SN_LIBCUBLASLT="$standin_cublaslt" \
    "$sinter" train $short --precision fp16 --device cuda --log cuda16.csv > out.txt 2> err.txt || fail "fp16 on the stand-in"
awk -F, 'NR == FNR { l[$1] = $2; next } FNR > 1 { d = $2 - l[$1]; if (d < 0) d = -d; if (d > 1e-4 * l[$1]) bad = 1 }
         END { exit bad }' cpu16.csv cuda16.csv || { paste -d' ' cpu16.csv cuda16.csv; fail "fp16: the stand-in's losses differ"; }
echo "QLoRA in fp16: the stand-in CUDA device within 1e-4 of the CPU device's losses"
