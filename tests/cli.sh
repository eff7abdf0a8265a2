#!/bin/sh
# cli.sh SINTER: the command line's help, the one compile pipeline as `sinter train` runs it
# (--dump-after prints the program the trainer runs), and a clean exit with the library's message
# when the program cannot fit in memory; --emit-cuda writes the kernels' CUDA C.
set -eu
sinter=$1
"$sinter" graph --help | grep -q "graph --model NAME" || { echo "FAIL: graph --help"; exit 1; }
"$sinter" train --help | grep -q -- "--dump-after PASS" || { echo "FAIL: train --help"; exit 1; }
"$sinter" prepare --help | grep -q "usage: sinter prepare" || { echo "FAIL: prepare --help"; exit 1; }
dir=$(mktemp -d /tmp/sn_cli_XXXXXX)
trap 'rm -rf "$dir"' EXIT
seq 1 400 | awk '{ print "line " $1 }' > "$dir/corpus.txt"
tiny="--model tiny --data $dir/corpus.txt --batch 2 --seq 16 --steps 2 --sample-len 0"
# shellcheck disable=SC2086
"$sinter" train $tiny --dump-after fuse > "$dir/fuse.out"
[ "$(grep -c '^# after pass fuse$' "$dir/fuse.out")" = 1 ] || { echo "FAIL: fuse dumped not once"; cat "$dir/fuse.out"; exit 1; }
grep -q "^k0_embedding .* gather" "$dir/fuse.out" || { echo "FAIL: no kernels"; cat "$dir/fuse.out"; exit 1; }
grep -q "^step  *2/2" "$dir/fuse.out" || { echo "FAIL: training did not run after the dump"; exit 1; }
# shellcheck disable=SC2086
"$sinter" train $tiny --dump-after memplan | grep -q "^# after pass memplan$" || { echo "FAIL: memplan"; exit 1; }
# --fp8 on a model whose products are all too small for it (tiny's 32 channels): said, and the
# run is the one without (the same losses); sinter graph shows the pass's 8-bit products
# shellcheck disable=SC2086
"$sinter" train $tiny --fp8 linear --dump-after fp8 > "$dir/fp8.out" &&
  grep -q "^fp8: no product qualifies" "$dir/fp8.out" && grep -q "^# after pass fp8$" "$dir/fp8.out" ||
  { echo "FAIL: --fp8 on tiny"; cat "$dir/fp8.out"; exit 1; }
"$sinter" graph --model demo --batch 2 --seq 48 --backward --precision bf16 --fp8 head --dump-after fp8 > "$dir/fp8g.out" &&
  [ "$(grep -c ' = cast .* : f8e5m2\[' "$dir/fp8g.out")" = 2 ] && [ "$(grep -c ' = pow2_scale ' "$dir/fp8g.out")" = 3 ] ||
  { echo "FAIL: sinter graph --fp8 head: want the head's 2 e5m2 copies of dlogits and 3 scales"; grep -E "f8e|pow2" "$dir/fp8g.out"; exit 1; }
# shellcheck disable=SC2086
"$sinter" train $tiny --dump-after attention | grep -q "= attention_lse " || { echo "FAIL: attention"; exit 1; }
# --precision: the autocast pass and its errors
"$sinter" graph --model tiny --seq 16 --precision bf16 --dump-after autocast > "$dir/ac.out"
grep -q "= cast .* : bf16\[" "$dir/ac.out" && grep -q "= matmul .* : f32\[" "$dir/ac.out" ||
    { echo "FAIL: autocast dump"; cat "$dir/ac.out"; exit 1; }
# shellcheck disable=SC2086
"$sinter" train $tiny --precision bf16 | grep -q "^precision: bf16" || { echo "FAIL: train --precision"; exit 1; }
# no --precision (auto): fp32 on the CPU, whatever its features (the same losses on every x86
# machine), the explicit fp32 run's
# shellcheck disable=SC2086
"$sinter" train $tiny > "$dir/auto.out" && "$sinter" train $tiny --precision fp32 > "$dir/fp32.out" &&
  grep -q "^precision: fp32 (auto" "$dir/auto.out" &&
  [ "$(grep '^step' "$dir/auto.out" | cut -d'|' -f1-2)" = "$(grep '^step' "$dir/fp32.out" | cut -d'|' -f1-2)" ] ||
  { echo "FAIL: train's default precision on the CPU"; cat "$dir/auto.out"; exit 1; }
# a resumed run without --precision takes its checkpoint's (bf16 here, on the CPU), where an
# explicit other one is refused
# shellcheck disable=SC2086
"$sinter" train $tiny --precision bf16 --checkpoint "$dir/b16.ckpt" > /dev/null &&
  "$sinter" train $tiny --resume "$dir/b16.ckpt" > "$dir/b16r.out" &&
  grep -q "^precision: bf16 (auto: the checkpoint's)$" "$dir/b16r.out" &&
  grep -q "already complete" "$dir/b16r.out" ||
  { echo "FAIL: a resumed run's precision"; cat "$dir/b16r.out"; exit 1; }
# shellcheck disable=SC2086
if "$sinter" train $tiny --resume "$dir/b16.ckpt" --precision fp32 > "$dir/b16f.out" 2>&1; then
  echo "FAIL: a bf16 checkpoint resumed in fp32"; exit 1
fi
grep -q "precision is bf16 there, fp32 here" "$dir/b16f.out" || { echo "FAIL: the refusal"; cat "$dir/b16f.out"; exit 1; }
status=0
"$sinter" graph --model tiny --precision fp8 2> "$dir/prec.err" > /dev/null || status=$?
[ "$status" = 2 ] && grep -q "graph: --precision is fp32, bf16, fp16 or tf32, not 'fp8'" "$dir/prec.err" ||
    { echo "FAIL: --precision fp8 ($status)"; cat "$dir/prec.err"; exit 1; }
status=0
"$sinter" graph --model tiny --dump-after autocast 2> "$dir/prec.err" > /dev/null || status=$?
[ "$status" = 1 ] && grep -q "the precision is fp32" "$dir/prec.err" ||
    { echo "FAIL: --dump-after autocast at fp32 ($status)"; cat "$dir/prec.err"; exit 1; }
# an arena no machine has: a status from the library, a message, exit 1, no abort
status=0
"$sinter" train --model gpt2 --data "$dir/corpus.txt" --batch 4096 --steps 1 --sample-len 0 \
    > /dev/null 2> "$dir/oom.err" || status=$?
[ "$status" = 1 ] || { echo "FAIL: exit status $status"; cat "$dir/oom.err"; exit 1; }
grep -q "arena .* does not fit on the device: out of memory: the CPU device cannot allocate .* GiB" "$dir/oom.err" &&
    grep -q "use a smaller --batch or --seq" "$dir/oom.err" || { echo "FAIL: message"; cat "$dir/oom.err"; exit 1; }
# --emit-cuda: the program's CUDA C as one unit, and (with NVRTC) each kernel's ptxas report
"$sinter" graph --model tiny --backward --seq 16 --emit-cuda "$dir/cuda" > "$dir/cuda.out"
grep -q "extern \"C\" __global__" "$dir/cuda/program.cu" || { echo "FAIL: no program.cu"; cat "$dir/cuda.out"; exit 1; }
if [ -f "$dir/cuda/ptxas.txt" ]; then
    grep -q "^k0_embedding k0_embedding [0-9]" "$dir/cuda/ptxas.txt" || { echo "FAIL: ptxas.txt"; cat "$dir/cuda/ptxas.txt"; exit 1; }
    [ -s "$dir/cuda/program.cubin" ] || { echo "FAIL: no program.cubin"; exit 1; }
fi
grep -q "SINTER_PRELUDE_H" "$dir/cuda/sinter_prelude.h" || { echo "FAIL: no sinter_prelude.h"; exit 1; }
# again into the same directory: its own files replaced; a user's program.cu there is kept and
# the run refused
"$sinter" graph --model tiny --backward --seq 16 --emit-cuda "$dir/cuda" > /dev/null || { echo "FAIL: emit again"; exit 1; }
mkdir -p "$dir/mine" && echo "int main(void) { return 0; }" > "$dir/mine/program.cu"
status=0
"$sinter" graph --model tiny --backward --seq 16 --emit-cuda "$dir/mine" > /dev/null 2> "$dir/mine.err" || status=$?
[ "$status" = 1 ] && grep -q "program.cu exists and is not sinter's program.cu" "$dir/mine.err" &&
    grep -q "^int main" "$dir/mine/program.cu" || { echo "FAIL: a user's program.cu ($status)"; cat "$dir/mine.err"; exit 1; }
# sinter plan: gpt2 B=16 T=1024 in 6 GiB (the LM head in chunks, then checkpointing); with the
# head whole, a smaller micro-batch; nothing fits in 2 GiB: exit 1 naming the smallest budget
"$sinter" plan --model gpt2 --batch 16 --seq 1024 --mem 6GiB > "$dir/plan.out" || { echo "FAIL: plan"; exit 1; }
grep -q "^choice: micro-batch 16 x 1 accumulation step, checkpoint policy budget, .*, LM head in 4 chunks$" "$dir/plan.out" &&
    grep -q "^  activations (arena) .* recompute +.*; LM head in 4 chunks" "$dir/plan.out" || { echo "FAIL: plan table"; cat "$dir/plan.out"; exit 1; }
# validation's program: its row, its arena in the training one's
grep -q "^  evaluation .* validation: forward only, arena .* (in the training arena)$" "$dir/plan.out" ||
    { echo "FAIL: plan: no evaluation row"; cat "$dir/plan.out"; exit 1; }
"$sinter" plan --model gpt2 --batch 16 --seq 1024 --mem 6GiB --chunk-logits 0 > "$dir/plan0.out" || { echo "FAIL: plan whole"; exit 1; }
grep -q "^choice: micro-batch 8 x 2 accumulation steps, checkpoint policy budget, [a-z0-9, ]*none$" "$dir/plan0.out" ||
    { echo "FAIL: plan with the head whole"; cat "$dir/plan0.out"; exit 1; }
# sinter train --chunk-logits: the same losses and norms as printed (within 1e-6: test_recompute)
# shellcheck disable=SC2086
"$sinter" train $tiny --chunk-logits 8 | grep "^step" | cut -d'|' -f2,4 > "$dir/chunked.steps"
# shellcheck disable=SC2086
"$sinter" train $tiny | grep "^step" | cut -d'|' -f2,4 > "$dir/whole.steps"
[ -s "$dir/whole.steps" ] && cmp -s "$dir/chunked.steps" "$dir/whole.steps" ||
    { echo "FAIL: train --chunk-logits"; cat "$dir/chunked.steps" "$dir/whole.steps"; exit 1; }
# sinter graph --chunk-logits: the chunks in the IR; refused without the backward
"$sinter" graph --model tiny --backward --seq 16 --chunk-logits 8 | grep -q "; LM head in 8 chunks" ||
    { echo "FAIL: graph --chunk-logits"; exit 1; }
if "$sinter" graph --model tiny --chunk-logits 8 2> "$dir/chunk.err" > /dev/null; then echo "FAIL: chunks without backward"; exit 1; fi
grep -q "chunk-logits splits the loss's backward too: add --backward" "$dir/chunk.err" || { echo "FAIL: chunk message"; cat "$dir/chunk.err"; exit 1; }
status=0
"$sinter" plan --model gpt2 --batch 16 --seq 1024 --mem 2GiB --no-offload > /dev/null 2> "$dir/plan.err" || status=$?
[ "$status" = 1 ] && grep -q "plan: nothing fits in 2.0 GiB: the smallest budget that would fit is 2.[0-9] GiB" "$dir/plan.err" ||
    { echo "FAIL: plan refusal ($status)"; cat "$dir/plan.err"; exit 1; }
# with the optimizer state offloaded to the host it fits
"$sinter" plan --model gpt2 --batch 16 --seq 1024 --mem 2GiB | grep -q "offload optimizer state to the host" ||
    { echo "FAIL: plan with offload"; exit 1; }
# bf16 for the CUDA target: the autocast pass in the plan's compile, cuBLASLt's workspace
"$sinter" plan --model tiny --batch 4 --seq 16 --mem 1GiB --device cuda --precision bf16 > "$dir/bf16.out" || exit 1
grep -q "^choice: .*precision bf16" "$dir/bf16.out" && grep -q "^  workspace .* 33554432  cuBLASLt" "$dir/bf16.out" &&
    grep -q "^plan: tiny, .*, cuda sm_80" "$dir/bf16.out" || { echo "FAIL: plan bf16 cuda"; cat "$dir/bf16.out"; exit 1; }
"$sinter" plan --model tiny --mem 1GiB --precision fp8 2> "$dir/bf16.err" && exit 1
grep -q "plan: --precision is auto, fp32, bf16, fp16 or tf32, not 'fp8'" "$dir/bf16.err" || { echo "FAIL: fp8"; cat "$dir/bf16.err"; exit 1; }
# --in-order: the training tokens read in order; a resume must read them so too
# shellcheck disable=SC2086
"$sinter" train $tiny --in-order --checkpoint "$dir/order.ckpt" > "$dir/order.out" || { echo "FAIL: --in-order"; exit 1; }
# shellcheck disable=SC2086
if "$sinter" train $tiny --resume "$dir/order.ckpt" > "$dir/order2.out" 2> "$dir/order.err"; then
    echo "FAIL: resumed an in-order run at random"; exit 1; fi
grep -q "data.order = in order, which this run does not set" "$dir/order.err" ||
    { echo "FAIL: no data.order refusal"; cat "$dir/order.err"; exit 1; }
# the LLaMA family: sinter plan's total for llama-tiny with LoRA is what train --mem then plans
"$sinter" plan --model llama-tiny --tokenizer bytes --batch 4 --seq 16 --mem 600KiB --lora 4 > "$dir/llama.out" ||
    { echo "FAIL: plan llama-tiny"; cat "$dir/llama.out"; exit 1; }
grep -q "^plan: llama-tiny, LoRA rank 4 alpha 4 on all, batch 4 x seq 16" "$dir/llama.out" ||
    { echo "FAIL: plan llama-tiny header"; cat "$dir/llama.out"; exit 1; }
ltotal=$(awk '/^  total \(device\)/ {print $NF}' "$dir/llama.out")
"$sinter" train --model llama-tiny --tokenizer bytes --data "$dir/corpus.txt" --batch 4 --seq 16 --steps 1 \
    --sample-len 0 --lora 4 --mem 600KiB > "$dir/llama_mem.out" || { echo "FAIL: train llama --mem"; cat "$dir/llama_mem.out"; exit 1; }
grep -q "^memory: planned [^(]*($ltotal bytes), measured [^(]*($ltotal bytes" "$dir/llama_mem.out" ||
    { echo "FAIL: llama plan $ltotal"; cat "$dir/llama_mem.out"; exit 1; }
# QLoRA (issue 25): plan --qlora stores the base's linear weights as NF4: fewer weight bytes than
# --lora's; --lora with --qlora refused by name (train --qlora: tests/qlora.sh)
"$sinter" plan --model llama-tiny --tokenizer bytes --batch 4 --seq 16 --mem 600KiB --qlora 4 > "$dir/qlora.out" ||
    { echo "FAIL: plan --qlora"; cat "$dir/qlora.out"; exit 1; }
grep -q "^plan: llama-tiny, QLoRA (NF4 base) rank 4 alpha 4 on all, batch 4 x seq 16" "$dir/qlora.out" ||
    { echo "FAIL: plan --qlora header"; cat "$dir/qlora.out"; exit 1; }
lw=$(awk '/^  weights/ {print $4}' "$dir/llama.out"); qw=$(awk '/^  weights/ {print $4}' "$dir/qlora.out")
[ -n "$qw" ] && [ "$qw" -lt "$lw" ] || { echo "FAIL: QLoRA's weights $qw bytes, LoRA's $lw"; cat "$dir/qlora.out"; exit 1; }
# issue 25's target: gpt2-xl QLoRA rank 16 at B=4 T=1024 planned within 3 GiB; the budget policy
# alone stops at 3.6 GiB, the block policy (the plan's last resort) fits it
"$sinter" plan --model gpt2-xl --qlora 16 --batch 4 --seq 1024 --device cuda --precision bf16 \
    --mem 3GiB > "$dir/qlora_xl.out" || { echo "FAIL: gpt2-xl QLoRA in 3 GiB"; cat "$dir/qlora_xl.out"; exit 1; }
grep -q "^choice: .*checkpoint policy block" "$dir/qlora_xl.out" ||
    { echo "FAIL: gpt2-xl QLoRA's plan took no block policy"; cat "$dir/qlora_xl.out"; exit 1; }
# its weights itemised (issue 25 item 6): gpt2-xl's 48 layers of 1600 x 4800, 1600 x 1600 and
# two of 1600 x 6400 are 1474560000 NF4 weights, 4 bits each; the 19660800 trained f32
codes=$(awk '/^    NF4 base: codes/ {print $6}' "$dir/qlora_xl.out")
trained=$(awk '/^    trained \(fp32 masters\)/ {print $6}' "$dir/qlora_xl.out")
[ "$codes" = 737280000 ] && [ "$trained" = 78643200 ] && grep -q "^    NF4 base: scales" "$dir/qlora_xl.out" ||
    { echo "FAIL: gpt2-xl QLoRA's weights itemised: codes $codes, trained $trained"; cat "$dir/qlora_xl.out"; exit 1; }
if "$sinter" plan --model llama-tiny --mem 1MiB --lora 4 --qlora 4 2> "$dir/qlora.err"; then
    echo "FAIL: plan took --lora with --qlora"; exit 1; fi
grep -q "give one of them" "$dir/qlora.err" || { echo "FAIL: no --lora/--qlora refusal"; cat "$dir/qlora.err"; exit 1; }
# train --mem: the plan's total is what the device holds after the first step, to the byte
# shellcheck disable=SC2086
"$sinter" train $tiny --batch 4 --mem 760KiB > "$dir/mem.out" || { echo "FAIL: train --mem"; cat "$dir/mem.out"; exit 1; }
line=$(grep "^memory: planned" "$dir/mem.out") || { echo "FAIL: no memory line"; cat "$dir/mem.out"; exit 1; }
planned=$(echo "$line" | sed 's/.*planned [^(]*(\([0-9]*\) bytes).*/\1/')
measured=$(echo "$line" | sed 's/.*measured [^(]*(\([0-9]*\) bytes:.*/\1/')
[ -n "$planned" ] && [ "$planned" = "$measured" ] || { echo "FAIL: planned $planned measured $measured"; exit 1; }
# --mem auto: the plan's budget is the RAM available less max(1 GiB, 10%) (api/session.h
# sn_session_mem_auto), planned = measured under it; the interpreter has no memory to plan;
# another word is a usage error
# shellcheck disable=SC2086
"$sinter" train $tiny --batch 4 --mem auto > "$dir/auto.out" || { echo "FAIL: train --mem auto"; cat "$dir/auto.out"; exit 1; }
line=$(grep "^memory: --mem auto: " "$dir/auto.out") || { echo "FAIL: no budget line"; cat "$dir/auto.out"; exit 1; }
budget=$(echo "$line" | sed 's/^[^(]*(\([0-9]*\) bytes).*/\1/')
free=$(echo "$line" | sed 's/.*the [^(]*(\([0-9]*\) bytes) the device had free.*/\1/')
reserve=$((free / 10 > 1073741824 ? free / 10 : 1073741824))
[ "$budget" = $((free - reserve)) ] || { echo "FAIL: --mem auto: budget $budget of $free free"; exit 1; }
grep -q "^  budget .* $budget  fits" "$dir/auto.out" || { echo "FAIL: the plan's budget"; cat "$dir/auto.out"; exit 1; }
line=$(grep "^memory: planned" "$dir/auto.out") || { echo "FAIL: no memory line (auto)"; cat "$dir/auto.out"; exit 1; }
planned=$(echo "$line" | sed 's/.*planned [^(]*(\([0-9]*\) bytes).*/\1/')
measured=$(echo "$line" | sed 's/.*measured [^(]*(\([0-9]*\) bytes:.*/\1/')
[ -n "$planned" ] && [ "$planned" = "$measured" ] || { echo "FAIL: auto: planned $planned measured $measured"; exit 1; }
# sinter plan --mem auto: the same rule, its budget printed before the plan's
"$sinter" plan --model tiny --batch 4 --seq 16 --mem auto > "$dir/plan_auto.out" || { echo "FAIL: plan --mem auto"; cat "$dir/plan_auto.out"; exit 1; }
line=$(grep "^memory: --mem auto: " "$dir/plan_auto.out") || { echo "FAIL: plan: no budget line"; cat "$dir/plan_auto.out"; exit 1; }
budget=$(echo "$line" | sed 's/^[^(]*(\([0-9]*\) bytes).*/\1/')
free=$(echo "$line" | sed 's/.*the [^(]*(\([0-9]*\) bytes) the device has free.*/\1/')
reserve=$((free / 10 > 1073741824 ? free / 10 : 1073741824))
[ "$budget" = $((free - reserve)) ] && grep -q "^  budget .* $budget  fits" "$dir/plan_auto.out" ||
    { echo "FAIL: plan --mem auto: budget $budget of $free free"; cat "$dir/plan_auto.out"; exit 1; }
# shellcheck disable=SC2086
if "$sinter" train $tiny --device interp --mem auto 2> "$dir/auto.err"; then echo "FAIL: interp --mem auto"; exit 1; fi
grep -q "the interpreter has none" "$dir/auto.err" || { echo "FAIL: interp --mem auto message"; cat "$dir/auto.err"; exit 1; }
# shellcheck disable=SC2086
if "$sinter" train $tiny --mem automatic 2> "$dir/auto.err"; then echo "FAIL: --mem automatic"; exit 1; fi
grep -q "wants a size such as 6GiB or 500MiB, or auto, not 'automatic'" "$dir/auto.err" ||
    { echo "FAIL: --mem automatic message"; cat "$dir/auto.err"; exit 1; }
# a budget that fits only with the optimizer state on the host: the trainer offloads, and the
# device bytes and the host bytes are the plan's
# shellcheck disable=SC2086
"$sinter" train $tiny --batch 4 --mem 600KiB > "$dir/off.out" || { echo "FAIL: train --mem offload"; cat "$dir/off.out"; exit 1; }
grep -q "^choice: .*offload optimizer state to the host" "$dir/off.out" &&
    grep -q "^device: .*optimizer state on the host" "$dir/off.out" || { echo "FAIL: no offload"; cat "$dir/off.out"; exit 1; }
for what in "^memory: planned" "^host memory: optimizer state planned"; do
    line=$(grep "$what" "$dir/off.out") || { echo "FAIL: no '$what'"; cat "$dir/off.out"; exit 1; }
    planned=$(echo "$line" | sed 's/.*planned [^(]*(\([0-9]*\) bytes).*/\1/')
    measured=$(echo "$line" | sed 's/.*measured [^(]*(\([0-9]*\) bytes:.*/\1/')
    [ -n "$planned" ] && [ "$planned" = "$measured" ] || { echo "FAIL: offload: planned $planned measured $measured"; exit 1; }
done
# the delayed parameter update: its host bytes planned as measured; refused without --offload
# shellcheck disable=SC2086
"$sinter" train $tiny --batch 4 --mem 600KiB --offload optimizer --offload-delay --offload-threads 1 > "$dir/dpu.out" ||
    { echo "FAIL: train --offload-delay"; cat "$dir/dpu.out"; exit 1; }
line=$(grep "^host memory: optimizer state planned" "$dir/dpu.out") || { echo "FAIL: no host line"; cat "$dir/dpu.out"; exit 1; }
planned=$(echo "$line" | sed 's/.*planned [^(]*(\([0-9]*\) bytes).*/\1/')
measured=$(echo "$line" | sed 's/.*measured [^(]*(\([0-9]*\) bytes:.*/\1/')
[ -n "$planned" ] && [ "$planned" = "$measured" ] || { echo "FAIL: delay: planned $planned measured $measured"; exit 1; }
status=0
"$sinter" train $tiny --offload-delay 2> "$dir/dpu.err" || status=$?
[ "$status" = 2 ] && grep -q "add --offload optimizer" "$dir/dpu.err" || { echo "FAIL: --offload-delay alone"; cat "$dir/dpu.err"; exit 1; }
status=0
"$sinter" train $tiny --offload optimizer --offload-threads 2 2> "$dir/dpu.err" || status=$?
[ "$status" = 2 ] && grep -q "add --offload-delay" "$dir/dpu.err" || { echo "FAIL: --offload-threads alone"; cat "$dir/dpu.err"; exit 1; }
"$sinter" train $tiny --device interp --offload optimizer 2> "$dir/off.err" && exit 1
grep -q "the interpreter has none (use --device cpu or cuda)" "$dir/off.err" || { echo "FAIL: offload on interp"; cat "$dir/off.err"; exit 1; }
echo "help, --dump-after during train, --precision, out of memory as a message, --emit-cuda, plan, train --mem (and with offload): ok"
