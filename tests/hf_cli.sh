#!/bin/sh
# hf_cli.sh SINTER FIXTURES: pretrained weights from the command line (issue 23). A base run's
# checkpoint is exported as a Hugging Face directory and as llm.c's .bin; a run started from
# either with --init-hf has the losses of the run started from the checkpoint itself (--init);
# a LoRA run's checkpoint exports with its adapters merged; an export never replaces a file; a
# model whose vocabulary is not the tokenizer's, and an unsupported config.json, are refused
# with messages that say what to do.
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
fixtures=$(cd "$2" && pwd)
dir=$(mktemp -d /tmp/sn_hf_cli_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -n 8 $f; }; done; exit 1; }
seq 1 3000 | awk '{ print "line " $1 ": the quick brown fox jumps over " ($1 * 7) % 13 " lazy dogs" }' > corpus.txt
common="--data corpus.txt --batch 2 --seq 16 --sample-len 0 --eval-every 0 --device cpu"
losses() { cut -d, -f1-5 "$1"; } # step,loss,val_loss,lr,grad_norm (tokens/s differ)

# shellcheck disable=SC2086
"$sinter" train --model tiny $common --steps 10 --checkpoint base.ckpt > out.txt 2> err.txt || fail "base run"
"$sinter" export base.ckpt --to hf > out.txt 2> err.txt || fail "export --to"
grep -q "^exported base.ckpt (tiny: 2 layers, 2 heads, 32 channels, context 32, vocabulary 256) to hf" out.txt || fail "export line"
[ -f hf/config.json ] && [ -f hf/model.safetensors ] || fail "no config.json or model.safetensors"
"$sinter" export base.ckpt --to-llmc base.bin > out.txt 2> err.txt || fail "export --to-llmc"
# never replaced
if "$sinter" export base.ckpt --to hf > out.txt 2> err.txt; then fail "export replaced hf/"; fi
grep -q "hf/config.json exists: it is not replaced" err.txt || fail "no refusal for hf/"
if "$sinter" export base.ckpt --to-llmc base.bin > out.txt 2> err.txt; then fail "export replaced base.bin"; fi
grep -q "base.bin exists: it is not replaced" err.txt || fail "no refusal for base.bin"

# new runs from the same weights: --init (the checkpoint), --init-hf (the directory, the .bin)
# shellcheck disable=SC2086
"$sinter" train --model tiny $common --steps 5 --init base.ckpt --log init.csv > out.txt 2> err.txt || fail "--init run"
for src in hf base.bin; do
    # shellcheck disable=SC2086
    "$sinter" train $common --steps 5 --init-hf $src --log hf.csv > out.txt 2> err.txt || fail "--init-hf $src"
    grep -q "^initialised from the pretrained $src" out.txt || fail "no init line for $src"
    grep -q "^sinter train: model tiny " out.txt || fail "the model is not tiny"
    losses init.csv > a.cut
    losses hf.csv > b.cut
    cmp a.cut b.cut || { diff a.cut b.cut | head; fail "--init-hf $src: not the losses of --init"; }
    rm hf.csv
done

# a LoRA run from the directory, exported merged
# shellcheck disable=SC2086
"$sinter" train $common --steps 5 --lr 1e-2 --init-hf hf --lora 4 --lora-alpha 8 --checkpoint lora.ckpt > out.txt 2> err.txt || fail "LoRA run"
grep -q "^LoRA: rank 4" out.txt || fail "no LoRA line"
"$sinter" export lora.ckpt --to merged --merge-lora > out.txt 2> err.txt || fail "export LoRA"
grep -q "adapters merged) to merged" out.txt || fail "not merged"
"$sinter" export lora.ckpt --adapter adapter > out.txt 2> err.txt || fail "export the adapters (PEFT)"
[ -s adapter/adapter_config.json ] && [ -s adapter/adapter_model.safetensors ] || fail "no PEFT adapter files"
status=0
"$sinter" export lora.ckpt --adapter adapter2 --merge-lora > out.txt 2> err.txt || status=$?
[ "$status" = 2 ] && grep -q "leave out --merge-lora" err.txt || fail "--adapter with --merge-lora: exit $status"
cmp -s hf/model.safetensors merged/model.safetensors && fail "the merged weights are the base's"

# refused: another vocabulary than the tokenizer's, a field sinter's GPT-2 cannot express
# shellcheck disable=SC2086
if "$sinter" train $common --steps 1 --init-hf "$fixtures/tiny" > out.txt 2> err.txt; then fail "vocab 96 accepted"; fi
grep -q "a vocabulary of 96 ids, the bytes tokenizer has 256" err.txt || fail "vocabulary message"
mkdir bad
cp hf/model.safetensors bad/
sed 's/"layer_norm_epsilon": [0-9.e-]*/"layer_norm_epsilon": 1e-06/' hf/config.json > bad/config.json
# shellcheck disable=SC2086
if "$sinter" train $common --steps 1 --init-hf bad > out.txt 2> err.txt; then fail "epsilon 1e-6 accepted"; fi
grep -q "layer_norm_epsilon is 1e-06" err.txt || fail "epsilon message"
if "$sinter" export nothing.ckpt --to out > out.txt 2> err.txt; then fail "export of nothing"; fi
[ ! -e out ] || fail "a failed export made its directory"
echo "export and --init-hf: same losses as --init, LoRA merged, nothing replaced, bad input refused"
