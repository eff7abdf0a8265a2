#!/bin/sh
# hf_llama_cli.sh SINTER FIXTURES: a LLaMA-family model from the command line (issue 23): a run
# started with --init-hf from transformers' tiny LLaMA (tests/fixtures/llama) is that model and
# lowers its loss, generates from its checkpoint and exports it (a run from the export has the
# losses of one from the checkpoint); --model llama-tiny trains from scratch on the interpreter and the CPU device;
# LoRA adapters train, merge on export, generate and export as PEFT's; a vocabulary that is not
# the tokenizer's and a config.json sinter cannot express are refused with messages that say why.
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
fixtures=$(cd "$2" && pwd)
dir=$(mktemp -d /tmp/sn_hf_llama_cli_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -n 8 $f; }; done; exit 1; }
seq 1 3000 | awk '{ print "line " $1 ": the quick brown fox jumps over " ($1 * 7) % 13 " lazy dogs" }' > corpus.txt
common="--data corpus.txt --batch 4 --seq 16 --sample-len 0 --eval-every 0"

# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 30 --lr 1e-2 --init-hf "$fixtures/llama" --log run.csv --checkpoint l.ckpt > out.txt 2> err.txt || fail "--init-hf llama"
grep -q "^initialised from the pretrained $fixtures/llama" out.txt || fail "no init line"
grep -q "^sinter train: model llama-tiny (34976 parameters), bytes tokenizer" out.txt || fail "not llama-tiny"
first=$(sed -n 2p run.csv | cut -d, -f2)
last=$(tail -n 1 run.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || fail "loss $first -> $last"

# sinter generate from its checkpoint with the KV cache: the same greedy text on both devices
# a config.json of no built-in shape (llama-custom): its configuration is kept in the checkpoint
# (model.config), so generate and export rebuild it, and the export's config.json is its own
mkdir custom && cp "$fixtures/llama/"* custom/
sed -e 's/"rope_theta": 10000.0/"rope_theta": 20000.0/' -e 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 1e-06/' \
    "$fixtures/llama/config.json" > custom/config.json
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 3 --init-hf custom --checkpoint c.ckpt > out.txt 2> err.txt || fail "--init-hf custom"
grep -q "model llama-custom" out.txt || fail "the custom shape is not named llama-custom"
"$sinter" generate c.ckpt -n 4 --device cpu --prompt line > out.txt 2> err.txt || fail "generate llama-custom"
"$sinter" export c.ckpt --to cex > out.txt 2> err.txt || fail "export llama-custom"
grep -q '"rope_theta": 20000.0' cex/config.json && grep -q '"rms_norm_eps": 1e-06' cex/config.json ||
    fail "the export's config.json is not the custom one: $(cat cex/config.json)"
cp -r custom custom2 && sed -i 's/"rope_theta": 20000.0/"rope_theta": 30000.0/' custom2/config.json
# shellcheck disable=SC2086
if "$sinter" train $common --device cpu --steps 3 --init-hf custom2 --resume c.ckpt > out.txt 2> err.txt; then
    fail "resumed with another rope_theta"; fi
grep -q "model.config is vocab=256" err.txt || fail "no model.config mismatch: $(cat err.txt)"
echo "llama-custom: trains, generates, exports its own config.json, refuses another on resume"

for d in interp cpu; do
    "$sinter" generate l.ckpt --device $d -p "line 1" -n 10 -t 0 > gen_$d.txt 2> err.txt || fail "generate on $d"
    grep -q "^generate: 10 tokens in" err.txt || fail "no generate line on $d"
done
cmp gen_interp.txt gen_cpu.txt || fail "greedy text differs between interp and cpu"

# sinter export to a Hugging Face directory; a run from it (--init-hf) has the losses of a run
# from the checkpoint itself (--init)
"$sinter" export l.ckpt --to ex > out.txt 2> err.txt || fail "export"
grep -q "^exported l.ckpt (llama-tiny: 2 layers, 4/2 heads, hidden 32, context 64, vocabulary 256) to ex" out.txt || fail "export line"
if "$sinter" export l.ckpt --to-llmc l.bin > out.txt 2> err.txt; then fail "llm.c export of llama"; fi
grep -q "llm.c's file holds GPT-2 only" err.txt || fail "no llm.c refusal"
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 5 --model llama-tiny --init l.ckpt --log a.csv > out.txt 2> err.txt || fail "--init l.ckpt"
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 5 --init-hf ex --log b.csv > out.txt 2> err.txt || fail "--init-hf ex"
cut -d, -f1-5 a.csv > a.cut
cut -d, -f1-5 b.csv > b.cut
cmp a.cut b.cut || { diff a.cut b.cut | head; fail "--init-hf of the export: not the losses of --init"; }

# LoRA on the LLaMA family: adapters beside q, k, v, o, gate, up and down (only they train);
# the merged export's model computes the adapted model's loss (its first step's, before any
# update: --init-hf of the export against --init of the LoRA checkpoint with the same adapters);
# generate reads the adapters; --adapter writes PEFT's files (Linear: no fan_in_fan_out)
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 20 --lr 3e-2 --init-hf "$fixtures/llama" --lora 4 --lora-alpha 8 \
    --checkpoint lo.ckpt > out.txt 2> err.txt || fail "LoRA on llama"
grep -q "^LoRA: rank 4, alpha 8 (scale 2), on all: 4096 of 39072 parameters trained" out.txt || fail "LoRA line: $(grep LoRA out.txt)"
"$sinter" export lo.ckpt --to lo-merged > out.txt 2> err.txt || fail "export LoRA llama merged"
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 1 --init lo.ckpt --model llama-tiny --lora 4 --lora-alpha 8 --log la.csv > out.txt 2> err.txt ||
    fail "--init of the LoRA checkpoint"
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 1 --init-hf lo-merged --log lb.csv > out.txt 2> err.txt || fail "--init-hf of the merged export"
la=$(sed -n 2p la.csv | cut -d, -f2)
lb=$(sed -n 2p lb.csv | cut -d, -f2)
awk -v a="$la" -v b="$lb" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' || fail "merged export's loss $lb, the LoRA model's $la"
# shellcheck disable=SC2086
"$sinter" train $common --device cpu --steps 1 --init-hf "$fixtures/llama" --log l0.csv > out.txt 2> err.txt || fail "the base model"
l0=$(sed -n 2p l0.csv | cut -d, -f2)
awk -v a="$la" -v b="$l0" 'BEGIN { d = a - b; exit !(d > 1e-3 || d < -1e-3) }' || fail "the adapters changed nothing: $la, the base $l0"
"$sinter" generate lo.ckpt --device cpu -p "line 1" -n 8 -t 0 > out.txt 2> err.txt || fail "generate from the LoRA checkpoint"
"$sinter" export lo.ckpt --adapter lo-peft > out.txt 2> err.txt || fail "PEFT export of llama"
grep -q '"fan_in_fan_out": false' lo-peft/adapter_config.json && grep -q '"model.layers.1.mlp.down_proj"' lo-peft/adapter_config.json ||
    fail "PEFT config: $(head -c 400 lo-peft/adapter_config.json)"
echo "LoRA on llama: the merged export's loss $lb, the adapted model's $la (the base's $l0)"

for d in interp cpu; do
    # shellcheck disable=SC2086
    "$sinter" train $common --device $d --steps 3 --model llama-tiny > out.txt 2> err.txt || fail "--model llama-tiny on $d"
    grep -q "^step     3/3 | loss" out.txt || fail "no third step on $d"
done

# refusals
# shellcheck disable=SC2086
if "$sinter" train $common --steps 1 --init-hf "$fixtures/llama3" > out.txt 2> err.txt; then fail "vocabulary 128 taken"; fi
grep -q "a vocabulary of 128 ids, the bytes tokenizer has 256" err.txt || fail "no vocabulary refusal"
mkdir bad && cp "$fixtures/llama/"* bad/
sed 's/"rope_type": "default"/"rope_type": "dynamic"/' "$fixtures/llama/config.json" > bad/config.json
# shellcheck disable=SC2086
if "$sinter" train $common --steps 1 --init-hf bad > out.txt 2> err.txt; then fail "dynamic rope taken"; fi
grep -q "rope_parameters.rope_type is dynamic" err.txt || fail "no rope refusal"
# the directory's own tokenizer.json is the run's tokenizer unless one is asked for (here one of
# 700 tokens beside a model of 256: refused, naming it; --tokenizer bytes takes the bytes)
mkdir withtok && cp "$fixtures/llama/"* withtok/ && cp "$fixtures/../tokenizers/gpt2/tokenizer.json" withtok/
# shellcheck disable=SC2086
if "$sinter" train $common --steps 1 --init-hf withtok > out.txt 2> err.txt; then fail "a 700-token tokenizer.json taken"; fi
grep -q "a vocabulary of 256 ids, the hf tokenizer has 700" err.txt || fail "the directory's tokenizer.json was not read: $(cat err.txt)"
# shellcheck disable=SC2086
"$sinter" train $common --steps 1 --init-hf withtok --tokenizer bytes > out.txt 2> err.txt || fail "--tokenizer bytes beside a tokenizer.json"
# TinyLlama's kind (byte fallback) is read the same way: 880 tokens, refused beside 256
cp "$fixtures/../tokenizers/tinyllama/tokenizer.json" withtok/
# shellcheck disable=SC2086
if "$sinter" train $common --steps 1 --init-hf withtok > out.txt 2> err.txt; then fail "an 880-token tokenizer.json taken"; fi
grep -q "a vocabulary of 256 ids, the hf tokenizer has 880" err.txt || fail "a byte-fallback tokenizer.json was not read: $(cat err.txt)"
# sinter generate --hf: transformers' tiny LLaMA straight from its directory (bytes: its 256 ids
# are the byte tokenizer's), greedy, is transformers' greedy generate token for token
# (llama_greedy.bin: "SNGR", version, P = 4, N = 24, the prompt's ids, then the new ones)
want=$(od -An -tu4 -j32 -N96 "$fixtures/llama_greedy.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
"$sinter" generate --hf "$fixtures/llama" --tokenizer bytes --temperature 0 -n 24 --device cpu \
    --prompt "$(printf '\005*Ot')" > gen.txt 2> err.txt || fail "generate --hf"
got=$(od -An -tu1 -j4 -N24 gen.txt | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$got" = "$want" ] || fail "generate --hf: $got, transformers: $want"
if "$sinter" generate --hf "$fixtures/llama3" --tokenizer bytes > out.txt 2> err.txt; then fail "a 256-id tokenizer on 128"; fi
grep -q "the tokenizer has 256 ids but .*llama3's vocabulary only 128" err.txt || fail "no vocabulary refusal: $(cat err.txt)"
if "$sinter" generate --hf "$fixtures/llama" > out.txt 2> err.txt; then fail "no tokenizer taken"; fi
grep -q "has no tokenizer.json: give the model's tokenizer with --tokenizer-file FILE, or --tokenizer gpt2 or bytes" err.txt ||
    fail "no tokenizer refusal: $(cat err.txt)"
echo "generate --hf: transformers' greedy tokens; a tokenizer too large or missing refused"

# sinter plan --hf: the imported shape (the parameters --init-hf trained above)
"$sinter" plan --hf "$fixtures/llama" --mem 1GiB --batch 4 --seq 16 > out.txt 2> err.txt || fail "plan --hf"
grep -q "^plan: llama-tiny, batch 4 x seq 16" out.txt && grep -q "^parameters: 34976," out.txt ||
    fail "plan --hf: $(head -2 out.txt)"
if "$sinter" plan --hf "$fixtures/llama" --model tiny --mem 1GiB > out.txt 2> err.txt; then fail "--model with --hf"; fi
grep -q "give one of them" err.txt || fail "no refusal of --model with --hf"
echo "plan --hf: the imported model's parameters"

echo "hf_llama_cli: ok (--init-hf loss $first -> $last)"
