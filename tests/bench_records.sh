#!/bin/sh
# bench_records.sh TRAIN_BENCH: train_bench's JSON records (bench/bench_json.c, json-c) on a tiny
# cpu run: one object a line, each record's field names in the order bench users and
# docs/gpu.md read them, numbers as their printf formats wrote them, and each line valid JSON
# (when python3 is there). Skipped (77) in a build without json-c, which says so.
set -eu
bench=$1
out=$(mktemp /tmp/sn_bench_records_XXXXXX)
trap 'rm -f "$out" "$out.err"' EXIT
fail() { echo "FAIL: $*"; cat "$out" "$out.err"; exit 1; }
"$bench" --model tiny --steps 1 --device cpu --batch 2 --seq 32 > "$out" 2> "$out.err" || fail "train_bench exited $?"
if grep -q "built without json-c" "$out.err"; then echo "skipped: no json-c"; exit 77; fi
head='bench phase device model batch seq lora qlora ia3 checkpoint offload ms_per_step tokens_per_s precision gflops peak_gflops peak_isa f32_peak_gflops bf16_peak_gflops mfu mfu_suspect'
step="$head trained_params compile_s startup_kernel_passes_s startup_exec_new_s startup_optimizer_s startup_param_init_s kernels_per_step optimizer_launches arena_planned_bytes arena_measured_bytes arena_no_reuse_bytes persistent_bytes optimizer_state_bytes gemm_s attention_s pointwise_s row_s reduce_s gather_s dequant_s"
keys() { sed -n "${1}p" "$out" | grep -o '"[a-z_0-9]*":' | tr -d '":' | tr '\n' ' ' | sed 's/ $//'; }
[ "$(grep -c . "$out")" = 3 ] || fail "not 3 records"
[ "$(keys 1)" = "$head" ] || fail "forward's fields: $(keys 1)"
[ "$(keys 2)" = "$step" ] || fail "train_step's fields: $(keys 2)"
[ "$(keys 3)" = "$head over_step training_program_to_loss_over_step" ] || fail "validation's fields: $(keys 3)"
grep -q '^{"bench":"train","phase":"forward","device":"cpu","model":"tiny","batch":2,"seq":32,"lora":0,"qlora":false,"ia3":false,"checkpoint":"none","offload":false,"ms_per_step":[0-9]*\.[0-9][0-9],"tokens_per_s":[0-9]*\.[0-9],' "$out" ||
    fail "forward's record does not start as json-c writes it (no spaces, ms_per_step as %.2f)"
grep -q '"mfu":[0-9]\.[0-9][0-9][0-9][0-9],"mfu_suspect":\(true\|false\)}$' "$out" || fail "mfu's text"
if command -v python3 > /dev/null; then
    python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$out" || fail "not JSON"
fi
# --qlora R: a fourth record, the LoRA step of the same rank timed beside the QLoRA one
"$bench" --model tiny --steps 1 --device cpu --batch 2 --seq 32 --qlora 2 > "$out" 2> "$out.err" || fail "--qlora exited $?"
[ "$(grep -c . "$out")" = 4 ] || fail "--qlora: not 4 records"
kinds='gemm_s attention_s pointwise_s row_s reduce_s gather_s dequant_s'
[ "$(keys 4)" = "$head kernels_per_step arena_planned_bytes persistent_bytes $kinds qlora_step_ms lora_step_ms qlora_over_lora qlora_persistent_bytes qlora_arena_planned_bytes" ] ||
    fail "train_step_lora's fields: $(keys 4)"
grep -q '"phase":"train_step_lora",.*"lora":2,"qlora":false,' "$out" || fail "the LoRA baseline's record"
grep -q '"phase":"train_step",.*"lora":2,"qlora":true,' "$out" || fail "the QLoRA step's record"
echo "train_bench: 3 records, their fields in order, valid JSON; --qlora's fourth"
