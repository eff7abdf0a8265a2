#!/bin/sh
# ia3.sh SINTER CUDA NVRTC CUBLASLT: IA3 fine-tuning from the command line. A base run's checkpoint starts a run of
# --ia3 (its vectors ones: the first loss is the base's), which trains the vectors alone and
# records IA3 in its metadata; a resume with --lora or without --ia3 is refused, --ia3 with --lora
# is a usage error; generate reads the checkpoint; export merges the vectors (--to) or writes
# PEFT's IA3 adapter (--adapter); llama-tiny the same; on the stand-in CUDA driver (tests/standin:
# the generated CUDA kernels compiled by NVRTC and run by the simulator) tiny's IA3 run has the
# CPU device's losses.
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
standin_cuda=$2 standin_nvrtc=$3 standin_cublaslt=$4
dir=$(mktemp -d /tmp/sn_ia3_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -n 8 $f; }; done; exit 1; }
seq 1 3000 | awk '{ print "line " $1 ": the quick brown fox jumps over " ($1 * 7) % 13 " lazy dogs" }' > corpus.txt

for model in tiny llama-tiny; do
    common="--model $model --data corpus.txt --batch 2 --seq 16 --sample-len 0 --eval-every 0 --device cpu"
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 20 --lr 3e-3 --checkpoint base.ckpt --log base.csv > out.txt 2> err.txt || fail "$model: base run"
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 1 --lr 3e-2 --init base.ckpt --log full.csv > out.txt 2> err.txt || fail "$model: full run"
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 10 --lr 3e-2 --init base.ckpt --ia3 --checkpoint ia3.ckpt --log ia3.csv > out.txt 2> err.txt ||
        fail "$model: IA3 run"
    vectors=$([ $model = tiny ] && echo 4 || echo 6)
    grep -q "^initialised from base.ckpt (its weights; $vectors IA3 vectors it lacks start as usual: ones)" out.txt || fail "$model: no init line"
    grep -q "^IA3: keys, values and the MLP's inner activation scaled by learned vectors: [0-9]* of [0-9]* parameters trained" out.txt ||
        fail "$model: no IA3 line"
    [ "$(tail -n 1 ia3.csv | cut -d, -f1)" = 10 ] || fail "$model: the IA3 run's log"
    # the first step's loss (before any update) is the base model's, to the logged digits
    [ "$(sed -n 2p ia3.csv | cut -d, -f1-2)" = "$(sed -n 2p full.csv | cut -d, -f1-2)" ] ||
        fail "$model: first loss $(sed -n 2p ia3.csv) against the base's $(sed -n 2p full.csv)"

    # resumed with another choice: refused as LoRA's are
    status=0
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 10 --lr 3e-2 --lora 4 --resume ia3.ckpt > out.txt 2> err.txt || status=$?
    [ "$status" = 1 ] && grep -q "model.shape is .*, IA3 there, .*LoRA rank 4 alpha 4 on all here" err.txt ||
        fail "$model: resume of IA3 with --lora ($status)"
    status=0
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 10 --lr 3e-2 --resume ia3.ckpt > out.txt 2> err.txt || status=$?
    [ "$status" = 1 ] && grep -q "model.shape is .*, IA3 there" err.txt || fail "$model: resume of IA3 without --ia3 ($status)"
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 10 --lr 3e-2 --ia3 --resume ia3.ckpt > out.txt 2> err.txt || fail "$model: resume"
    grep -q "^resumed from ia3.ckpt at step 10$" out.txt || fail "$model: not resumed"

    "$sinter" generate ia3.ckpt --prompt "line 7" -n 8 -t 0 --device cpu > out.txt 2> err.txt || fail "$model: generate"
    "$sinter" export ia3.ckpt --to merged > out.txt 2> err.txt || fail "$model: export"
    [ $model = tiny ] && { grep -q "adapters merged) to merged" out.txt || fail "not merged"; }
    "$sinter" export ia3.ckpt --adapter peft > out.txt 2> err.txt || fail "$model: export --adapter"
    grep -q "exported the adapters of ia3.ckpt ($vectors modules) to peft (PEFT)" out.txt || fail "$model: PEFT line"
    grep -q '"peft_type": "IA3"' peft/adapter_config.json || fail "$model: peft_type"
    grep -q '"feedforward_modules"' peft/adapter_config.json || fail "$model: feedforward_modules"
    if [ $model = tiny ]; then # the stand-in CUDA device: the CPU device's losses within 1e-5
        short="$(echo "$common" | sed 's/--device cpu//') --steps 4 --lr 3e-2 --init base.ckpt --ia3"
        # shellcheck disable=SC2086
        "$sinter" train $short --device cpu --log cpu.csv > out.txt 2> err.txt || fail "short run"
        # shellcheck disable=SC2086
        XDG_CACHE_HOME="$dir/cache" SN_LIBCUDA="$standin_cuda" SN_LIBNVRTC="$standin_nvrtc" SN_LIBCUBLASLT="$standin_cublaslt" \
            "$sinter" train $short --device cuda --precision fp32 --log cuda.csv > out.txt 2> err.txt || fail "the stand-in CUDA device"
        grep -q "^device: cuda 0: sinter stand-in driver" out.txt || fail "not the stand-in"
        awk -F, 'NR == FNR { l[$1] = $2; next } FNR > 1 { d = $2 - l[$1]; if (d < 0) d = -d; if (d > 1e-5 * l[$1]) bad = 1 }
                 END { exit bad }' cpu.csv cuda.csv || { paste -d' ' cpu.csv cuda.csv; fail "the stand-in's losses differ"; }
    fi
    rm -rf merged peft ./*.ckpt ./*.csv
    echo "$model: --ia3 from a base checkpoint trains, resumes, refuses another choice, generates and exports"
done

# the plan: 2 layers of 2C (c_attn's k and v) and 4C (the MLP's) channels, C = 32, trained
"$sinter" plan --model tiny --mem 1GiB --batch 2 --seq 16 --ia3 > out.txt 2> err.txt || fail "plan --ia3"
grep -q "^plan: tiny, IA3, batch 2 x seq 16" out.txt && grep -q "^parameters: 35072, trained 384 (1.09%)" out.txt ||
    fail "plan --ia3's counts"
"$sinter" graph --model tiny --ia3 --backward --batch 1 --seq 8 > out.txt 2> err.txt || fail "graph --ia3"
grep -q "; IA3$" out.txt && grep -q "h.0.attn.c_attn.ia3_l" out.txt || fail "graph --ia3's model"
status=0
"$sinter" plan --model tiny --mem 1GiB --ia3 --lora 4 > out.txt 2> err.txt || status=$?
[ "$status" = 2 ] && grep -q "\-\-ia3 and --lora are two ways to fine-tune: choose one" err.txt || fail "plan --ia3 with --lora ($status)"

status=0
"$sinter" train --model tiny --data corpus.txt --steps 2 --ia3 --lora 4 > out.txt 2> err.txt || status=$?
[ "$status" = 2 ] && grep -q "\-\-ia3 and --lora are two ways to fine-tune: choose one" err.txt || fail "--ia3 with --lora ($status)"
echo "--ia3 with --lora: refused"
