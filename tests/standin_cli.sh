#!/bin/sh
# standin_cli.sh SINTER CUDA NVRTC CUBLASLT: `sinter` on the stand-in driver (tests/standin),
# named by SN_LIBCUDA, SN_LIBNVRTC and SN_LIBCUBLASLT: `info` lists its device, `train --device
# cuda --precision fp32` trains tiny GPT-2 with the CPU device's losses (as printed), the kernel
# cache warm on the second run; --precision bf16 and fp16 train, bf16 the default (auto) from
# sm_80 and fp16 before, bf16 also on sm_86, sm_89 and sm_120 (the RTX
# 30, 40 and 50 series) with sm_80's losses, fp16 also on an sm_75 GPU, where bf16 is refused
# by name; --fp8 linear trains on sm_90 with the CPU device's losses (within 5e-3) and is refused
# on sm_80; llama-tiny trains in full with the CPU device's losses (f32; bf16 within 0.1%).
set -eu
sinter=$1
export SN_LIBCUDA="$2" SN_LIBNVRTC="$3" SN_LIBCUBLASLT="$4"
dir=$(mktemp -d /tmp/sn_standin_cli_XXXXXX)
trap 'rm -rf "$dir"' EXIT
export XDG_CACHE_HOME="$dir/cache"
"$sinter" info > "$dir/info.out" 2>&1
grep -q "^  device 0: sinter stand-in driver (SIMT simulator, sm_80), sm_80" "$dir/info.out" ||
  { echo "FAIL: info"; cat "$dir/info.out"; exit 1; }
seq 1 400 | awk '{ print "line " $1 }' > "$dir/corpus.txt"
tiny="--model tiny --data $dir/corpus.txt --batch 2 --seq 16 --steps 3 --sample-len 0"
# shellcheck disable=SC2086
"$sinter" train $tiny --device cuda --precision fp32 > "$dir/cuda.out" 2>&1 || { echo "FAIL: train --device cuda"; cat "$dir/cuda.out"; exit 1; }
grep -q "^device: cuda 0: sinter stand-in driver" "$dir/cuda.out" || { echo "FAIL: device line"; cat "$dir/cuda.out"; exit 1; }
grep -q "^step  *3/3" "$dir/cuda.out" || { echo "FAIL: did not train"; cat "$dir/cuda.out"; exit 1; }
grep -q "^precision: fp32 (this GPU's tensor cores multiply bf16: --precision bf16 trains several times faster)" "$dir/cuda.out" ||
  { echo "FAIL: no bf16 hint on an sm_80 GPU"; cat "$dir/cuda.out"; exit 1; }
# shellcheck disable=SC2086
"$sinter" train $tiny --device cpu > "$dir/cpu.out" 2>&1
losses() { sed -n 's/^step *\([0-9]*\)\/.*| loss \([0-9.]*\) .*| grad norm *\([0-9.]*\) .*/\1 \2 \3/p' "$1"; }
[ -n "$(losses "$dir/cpu.out")" ] && [ "$(losses "$dir/cuda.out")" = "$(losses "$dir/cpu.out")" ] ||
  { echo "FAIL: losses differ"; losses "$dir/cuda.out"; losses "$dir/cpu.out"; exit 1; }
ls "$dir/cache/sinter/"*.cubin > /dev/null 2>&1 || { echo "FAIL: no kernel cache entries"; exit 1; }
# 16-bit programs (cuBLASLt bf16/f16 plans) train (test_standin compares them with the CPU
# device step by step)
for p in bf16 fp16; do
  # shellcheck disable=SC2086
  "$sinter" train $tiny --device cuda --precision $p > "$dir/$p.out" 2>&1 ||
    { echo "FAIL: train --device cuda --precision $p"; cat "$dir/$p.out"; exit 1; }
  grep -q "^step  *3/3" "$dir/$p.out" || { echo "FAIL: $p did not train"; cat "$dir/$p.out"; exit 1; }
done
# no --precision on a GPU (auto): bf16 from sm_80, the explicit run's losses
# shellcheck disable=SC2086
"$sinter" train $tiny --device cuda > "$dir/auto80.out" 2>&1 &&
  grep -q "^precision: bf16 (auto: this GPU's tensor cores multiply bf16; --precision fp32 for f32 products)$" "$dir/auto80.out" &&
  [ "$(losses "$dir/auto80.out")" = "$(losses "$dir/bf16.out")" ] ||
  { echo "FAIL: auto precision on sm_80"; cat "$dir/auto80.out"; exit 1; }
# and on an sm_75 GPU (a T4, the GTX 16xx) fp16, the loss scaled: f16 GEMMs, attention on mma
# m16n8k8
# shellcheck disable=SC2086
SN_STANDIN_SM=75 "$sinter" train $tiny --device cuda > "$dir/fp16-75.out" 2>&1 &&
  grep -q "^precision: fp16 (auto: this GPU's tensor cores multiply fp16, the loss scaled; --precision fp32 for f32 products)$" "$dir/fp16-75.out" &&
  grep -q "^step  *3/3" "$dir/fp16-75.out" || { echo "FAIL: fp16 on sm_75"; cat "$dir/fp16-75.out"; exit 1; }
# the consumer parts (an RTX 3090, 4090, 5090: sm_86, sm_89, sm_120, 99 KiB of shared memory a
# block): bf16 trains with the sm_80 stand-in's losses
# shellcheck disable=SC2086
for sm in 86 89 120; do
  SN_STANDIN_SM=$sm "$sinter" train $tiny --device cuda --precision bf16 > "$dir/bf16-$sm.out" 2>&1 &&
    grep -q "^step  *3/3" "$dir/bf16-$sm.out" || { echo "FAIL: bf16 on sm_$sm"; cat "$dir/bf16-$sm.out"; exit 1; }
  [ "$(losses "$dir/bf16-$sm.out")" = "$(losses "$dir/bf16.out")" ] ||
    { echo "FAIL: bf16 losses on sm_$sm"; losses "$dir/bf16-$sm.out"; losses "$dir/bf16.out"; exit 1; }
done
# bf16 GEMMs need sm_80: on an sm_75 GPU a clear refusal that names fp16
status=0
# shellcheck disable=SC2086
SN_STANDIN_SM=75 "$sinter" train $tiny --device cuda --precision bf16 > "$dir/bf16-75.out" 2>&1 || status=$?
[ "$status" = 1 ] && grep -q "bf16 operands, which need sm_80 or newer, and this GPU is sm_75: train with --precision fp16" "$dir/bf16-75.out" ||
  { echo "FAIL: bf16 GEMMs on sm_75 ($status)"; cat "$dir/bf16-75.out"; exit 1; }
# --fp8 linear on an sm_90 GPU: every linear layer's products through cuBLASLt's FP8 GEMMs (the
# stand-in's: TN, e4m3 by e5m2) with the CPU device's losses, the first step's within 1e-3, the
# second's 5e-3 (f32 sums in another order move a few 8-bit roundings, and a step at lr 3e-3
# carries them on: measured 1.3e-4 and 1.2e-3); refused by name on sm_80
small="--model demo --data $dir/corpus.txt --batch 2 --seq 48 --steps 2 --sample-len 0 --eval-every 0 --precision bf16 --fp8 linear"
# shellcheck disable=SC2086
SN_STANDIN_SM=90 "$sinter" train $small --device cuda > "$dir/fp8-90.out" 2>&1 &&
  "$sinter" train $small --device cpu > "$dir/fp8-cpu.out" 2>&1 &&
  grep -q "^fp8: 51 products on e4m3 operands, their gradients e5m2 (every linear layer's; docs/fp8.md)$" "$dir/fp8-90.out" ||
  { echo "FAIL: --fp8 linear on sm_90"; cat "$dir/fp8-90.out" "$dir/fp8-cpu.out"; exit 1; }
l90=$(losses "$dir/fp8-90.out" | awk '{ print $2 }'); lcpu=$(losses "$dir/fp8-cpu.out" | awk '{ print $2 }')
[ -n "$l90" ] && printf '%s\n%s\n' "$l90" "$lcpu" | awk '{ v[NR] = $1 } END { n = NR / 2; for (i = 1; i <= n; i++) { d = v[i] - v[i + n]; if (d < 0) d = -d; if (d > (i == 1 ? 1e-3 : 5e-3) * v[i + n]) exit 1 } }' ||
  { echo "FAIL: --fp8 linear losses, sm_90 against cpu"; echo "$l90"; echo "$lcpu"; exit 1; }
status=0
# shellcheck disable=SC2086
SN_STANDIN_SM=80 "$sinter" train $small --device cuda > "$dir/fp8-80.out" 2>&1 || status=$?
[ "$status" = 1 ] && grep -q "need tensor cores that multiply them (sm_89 and newer" "$dir/fp8-80.out" ||
  { echo "FAIL: --fp8 on sm_80 ($status)"; cat "$dir/fp8-80.out"; exit 1; }
# --mem auto on a GPU of 290 MiB free: the budget is 290 MiB less the 256 MiB reserve
# (api/session.h sn_session_mem_auto), the plan fits it (--batch 16: the LM head in chunks)
# and planned = measured; 200 MiB free is refused, naming the reserve
# shellcheck disable=SC2086
SN_STANDIN_MEM=290M "$sinter" train $tiny --device cuda --batch 16 --mem auto > "$dir/auto.out" 2>&1 ||
  { echo "FAIL: --mem auto"; cat "$dir/auto.out"; exit 1; }
grep -q "^memory: --mem auto: 34.0 MiB (35651584 bytes), the 290.0 MiB (304087040 bytes) the device had free" "$dir/auto.out" &&
  grep -q "^  budget  *34.0 MiB  *35651584  fits" "$dir/auto.out" ||
  { echo "FAIL: --mem auto's budget"; cat "$dir/auto.out"; exit 1; }
line=$(grep "^memory: planned" "$dir/auto.out") || { echo "FAIL: no memory line (auto)"; cat "$dir/auto.out"; exit 1; }
planned=$(echo "$line" | sed 's/.*planned [^(]*(\([0-9]*\) bytes).*/\1/')
measured=$(echo "$line" | sed 's/.*measured [^(]*(\([0-9]*\) bytes:.*/\1/')
[ -n "$planned" ] && [ "$planned" = "$measured" ] && [ "$planned" -le 35651584 ] ||
  { echo "FAIL: --mem auto: planned $planned measured $measured"; exit 1; }
# sinter plan --device cuda --mem auto asks the GPU too (8 GiB free: gpt2 at B=16 T=1024 in bf16
# fits with checkpointing), and plans for its architecture
SN_STANDIN_SM=89 SN_STANDIN_MEM=8G "$sinter" plan --model gpt2 --batch 16 --seq 1024 --device cuda \
  --mem auto > "$dir/plan-auto.out" 2>&1 || { echo "FAIL: plan --mem auto"; cat "$dir/plan-auto.out"; exit 1; }
grep -q "^memory: --mem auto: 7.6 GiB (8160437863 bytes), the 8.0 GiB (8589934592 bytes) the device has free" "$dir/plan-auto.out" &&
  grep -q "^plan: gpt2, batch 16 x seq 1024, budget 7.6 GiB, cuda sm_89, bf16$" "$dir/plan-auto.out" &&
  grep -q "^choice: .*checkpoint policy budget" "$dir/plan-auto.out" ||
  { echo "FAIL: plan --mem auto on the GPU"; cat "$dir/plan-auto.out"; exit 1; }
# shellcheck disable=SC2086
if SN_STANDIN_MEM=200M "$sinter" train $tiny --device cuda --mem auto > "$dir/auto-low.out" 2>&1; then
  echo "FAIL: --mem auto with 200 MiB free"; exit 1
fi
grep -q "has 200.0 MiB free of 200.0 MiB, less than the 256 MiB a run keeps in reserve with mem auto" "$dir/auto-low.out" ||
  { echo "FAIL: --mem auto's refusal"; cat "$dir/auto-low.out"; exit 1; }
# llama-tiny trained with extra options $2.. (name $1) in f32 and bf16, on the stand-in and the
# CPU device: f32 the CPU device's losses as printed, bf16 within 0.1% at every step (the
# products' rounding order differs by shape)
llama="--model llama-tiny --tokenizer bytes --data $dir/corpus.txt --batch 2 --seq 24 --steps 3 --sample-len 0 --log"
same_as_cpu() {
  name=$1
  shift
  for p in fp32 bf16; do
    for d in cuda cpu; do
      # shellcheck disable=SC2086
      "$sinter" train $llama "$dir/$name-$p-$d.csv" "$@" --device $d --precision $p > "$dir/$name-$p-$d.out" 2>&1 ||
        { echo "FAIL: llama-tiny $name $p on $d"; cat "$dir/$name-$p-$d.out"; exit 1; }
    done
  done
  [ "$(losses "$dir/$name-fp32-cuda.out")" = "$(losses "$dir/$name-fp32-cpu.out")" ] ||
    { echo "FAIL: llama-tiny $name's losses differ"; losses "$dir/$name-fp32-cuda.out"; losses "$dir/$name-fp32-cpu.out"; exit 1; }
  awk -F, 'NR == FNR { l[$1] = $2; next } FNR > 1 { d = $2 - l[$1]; if (d < 0) d = -d; if (d > 1e-3 * l[$1]) bad = 1; n++ }
           END { exit bad || n != 3 }' "$dir/$name-bf16-cpu.csv" "$dir/$name-bf16-cuda.csv" ||
    { echo "FAIL: llama-tiny $name's bf16 losses differ"; paste -d' ' "$dir/$name-bf16-cpu.csv" "$dir/$name-bf16-cuda.csv"; exit 1; }
}
# in full: the CUDA target makes q, k, v and gate, up one product each (passes/siblings.c; the
# CPU's keeps them apart)
same_as_cpu llama
# LoRA: the CUDA target joins the frozen q, k, v (gate, up) with their adapters (one base
# product, the adapters' B block-diagonal)
same_as_cpu lora --lora 4
# QLoRA on llama-tiny: the NF4 base's dequantized q, k, v (gate, up) concatenated and joined;
# f32, the losses as printed (bf16's 0.1% would not see gate and up swapped at this init)
"$sinter" train $llama "$dir/qlora-cuda.csv" --qlora 4 --device cuda --precision fp32 > "$dir/qlora-cuda.out" 2>&1 &&
  "$sinter" train $llama "$dir/qlora-cpu.csv" --qlora 4 --device cpu > "$dir/qlora-cpu.out" 2>&1 ||
  { echo "FAIL: llama-tiny --qlora 4"; cat "$dir/qlora-cuda.out" "$dir/qlora-cpu.out"; exit 1; }
[ "$(losses "$dir/qlora-cuda.out")" = "$(losses "$dir/qlora-cpu.out")" ] ||
  { echo "FAIL: llama-tiny QLoRA's losses differ"; losses "$dir/qlora-cuda.out"; losses "$dir/qlora-cpu.out"; exit 1; }
echo "sinter train --device cuda on the stand-in: the CPU device's losses, bf16 and fp16 train, fp16 on sm_75 too, bf16 refused there, --fp8 on sm_90 (refused on sm_80), --mem auto's budget, llama-tiny with its projections joined, in full, with LoRA and with QLoRA: ok"
losses "$dir/cuda.out"
losses "$dir/bf16.out"
losses "$dir/fp16.out"
losses "$dir/fp16-75.out"
