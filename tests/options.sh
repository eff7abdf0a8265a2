#!/bin/sh
# options.sh SINTER: every command's options from its one table (cli/opts.h): --help, -h and
# `sinter help COMMAND` print the same text; --version; the malformed forms are refused with a
# message naming what was wrong and exit status 2 (unknown option, operand, missing value, out of
# range with the range), --opt=value and short options accepted; GPT-2 models take GPT-2's
# tokenizer (the repository's assets) by default and plan, graph and train agree on it.
set -eu
. "$(dirname "$0")/cli_lib.sh" # $sinter, $dir (the working directory), fail, refused

for cmd in info graph train plan prepare export generate; do
    "$sinter" "$cmd" --help > help.txt || fail "$cmd --help"
    grep -q "^usage: sinter $cmd" help.txt || fail "$cmd --help: no usage line"
    grep -q -- "-h, --help" help.txt || fail "$cmd --help: no --help line"
    "$sinter" "$cmd" -h | cmp -s - help.txt || fail "$cmd -h differs from --help"
    "$sinter" help "$cmd" | cmp -s - help.txt || fail "help $cmd differs from $cmd --help"
    refused 2 "$cmd: unknown option '--bogus'" "$cmd" --bogus
    # export and generate take their CHECKPOINT first, then options only
    case $cmd in export|generate) refused 2 "$cmd: unexpected argument 'bar'" "$cmd" foo bar; continue ;; esac
    refused 2 "$cmd: unexpected argument 'foo'" "$cmd" foo
done
"$sinter" graph --help | grep -q -- "--checkpoint-policy P" || fail "graph --help lacks --checkpoint-policy"
"$sinter" graph --help | grep -q -- "--arena-budget N" || fail "graph --help lacks --arena-budget"
"$sinter" train --help | grep -q -- "-s, --steps N .*(from 1 to 100000000)" || fail "train --help: --steps' range"
"$sinter" --help | grep -q "^Exit status: 0 done; 1 a failure" || fail "--help: exit statuses"
for v in --version -V version; do
    "$sinter" $v | grep -q "^sinter [0-9]*\.[0-9]*\.[0-9]*$" || fail "$v"
done
refused 2 "unknown command 'bogus'" bogus
refused 2 "help: unknown command 'bogus'" help bogus
echo "help of every command from its table, --version"

refused 2 "train: unknown option '--bogus'" train --bogus 1
refused 2 "train: unexpected argument 'foo'" train foo
refused 2 "train: unexpected argument 'x'" train --steps 5 -- x
refused 2 "train: --seq wants a whole number from 1 to 1048576, not '99999999'" train --seq 99999999
refused 2 "train: --steps wants a whole number from 1 to 100000000, not '0'" train --steps=0
refused 2 "train: option '--steps' needs a value (N)" train --steps
refused 2 "train: option '--steps' needs a value (N)" train -s
refused 2 "train: option '--tf32' takes no value" train --tf32=yes
refused 2 "train: option '--sample' is ambiguous: --sample-len, --sample-every" train --sample 5
refused 2 "train: unknown option '-x'" train -x
refused 2 "train: --device is auto, cuda, cpu or interp, not 'gpu'" train --device=gpu
refused 2 "train: --model is gpt2, gpt2-medium, gpt2-large, gpt2-xl, demo, tiny, smollm2-135m, smollm2-360m, tinyllama-1.1b, llama-3.2-1b, qwen2.5-0.5b or llama-tiny, not 'gpt5'" train --model gpt5
refused 2 "plan: --mem wants a size such as 6GiB or 500MiB, or auto, not 'lots'" plan --model tiny --mem lots
# a value stored before a refusal (CI runs this suite under UBSan, which saw --offload-threads'
# long stored into an int field)
refused 2 "train: --offload-threads sets the delayed update's CPU threads: add --offload-delay" train --offload optimizer --offload-threads 2
refused 2 "graph: --pad-vocab wants a multiple from 0 to 1048576 (0: no padding) or pow2, not 'x'" graph --model tiny --pad-vocab x
refused 2 "prepare: --val-frac wants a number > 0 and < 1, not '1'" prepare --out x --val-frac 1
refused 2 "train: --bpe DIR is a GPT-2 tokenizer and --tokenizer bytes asks for another" train --tokenizer bytes --bpe x
echo "malformed options: exit 2, named"

# accepted forms: --opt=value, short options, "--" at the end
seq 1 400 | awk '{ print "line " $1 }' > corpus.txt
"$sinter" train --model=tiny -d corpus.txt -b 2 -t 16 --steps=2 --sample-len=0 --eval-every 0 -- \
    > ok.txt 2> err.txt || fail "--opt=value and short options refused"
grep -q "^step  *2/2" ok.txt || fail "the run did not take --steps=2"
grep -q "byte tokenizer (vocab 256)\|bytes tokenizer (vocab 256)\|(vocab 256)" ok.txt || fail "tiny is not byte-level"
echo "--opt=value, short options and -- accepted"

# GPT-2's vocabulary by default for the gpt2 models, bytes when asked; plan, graph, train agree
"$sinter" graph --model gpt2 --seq 8 --batch 1 --dump-after frontend | grep -q "^# model gpt2: vocab 50257" || fail "graph gpt2 vocab"
"$sinter" graph --model gpt2 --seq 8 --batch 1 --tokenizer bytes --dump-after frontend | grep -q "^# model gpt2: vocab 256" || fail "graph gpt2 bytes"
# the smallest budget of train's plan and of sinter plan's are the same, and the vocabulary's
# difference (38.6M embedding parameters) shows in it
smallest() { sed -n 's/.*the smallest budget that would fit is \([^(]*\) (.*/\1/p' err.txt; }
for tok in "" "--tokenizer bytes"; do
    # shellcheck disable=SC2086
    refused 1 "plan: nothing fits in 1.0 KiB" train --model gpt2 $tok --device cpu --mem 1KiB --batch 1 --seq 8 --data corpus.txt
    train=$(smallest)
    # shellcheck disable=SC2086
    refused 1 "plan: nothing fits in 1.0 KiB" plan --model gpt2 $tok --mem 1KiB --batch 1 --seq 8
    plan=$(smallest)
    [ -n "$train" ] && [ "$train" = "$plan" ] || fail "train's plan ($train) and sinter plan's ($plan) differ for '$tok'"
    if [ -z "$tok" ]; then budget_gpt2=$plan; else budget_bytes=$plan; fi
done
[ "$budget_gpt2" != "$budget_bytes" ] || fail "the tokenizer changed no budget ($budget_gpt2)"
# train gpt2 --tokenizer bytes reads bytes: shards of GPT-2 tokens are refused naming the fix
"$sinter" prepare --tokenizer gpt2 --data corpus.txt --out g > prep.txt || fail "prepare --tokenizer gpt2"
grep -q "(gpt2 tokenizer)" prep.txt || fail "prepare --tokenizer gpt2: $(cat prep.txt)"
refused 1 "need the GPT-2 tokenizer: --tokenizer gpt2" train --model gpt2 --tokenizer bytes --train-bin g_train.bin --val-bin g_val.bin
# the files missing: an error naming where it looked and what to do (exit 1)
mkdir empty
(export SINTER_ASSETS="$dir/empty"; refused 1 "none were found in $dir/empty/gpt2: give --bpe DIR" prepare --tokenizer gpt2 --data corpus.txt --out x)
(export SINTER_ASSETS="$dir/empty"; refused 1 "GPT-2's tokenizer (the default of --model gpt2)" train --model gpt2 --data corpus.txt)
echo "gpt2 models on GPT-2's tokenizer by default; plan, graph and train agree"

# the optimizer's knobs: taken, saved in the checkpoint, checked on resume; out of range refused
k="--model tiny -d corpus.txt -b 2 -t 16 --sample-len 0 --eval-every 0 --device cpu"
# shellcheck disable=SC2086
"$sinter" train $k --steps 3 --warmup 1 --weight-decay 0 --beta1 0.8 --beta2 0.99 --grad-clip 0 \
    --min-lr-frac 1 --checkpoint knobs.ckpt > knobs.txt 2>&1 || fail "the knobs: $(cat knobs.txt)"
grep -q "lr 3.00e-03" knobs.txt || fail "--warmup 1 --min-lr-frac 1: the lr is not the peak at every step"
# shellcheck disable=SC2086
refused 1 "train.beta1 is 0.8" train $k --steps 3 --warmup 1 --weight-decay 0 --beta1 0.9 --beta2 0.99 \
    --grad-clip 0 --min-lr-frac 1 --resume knobs.ckpt
# shellcheck disable=SC2086
refused 2 "--beta1 wants" train $k --beta1 1
# shellcheck disable=SC2086
refused 1 "warmup 9 (-1 .. steps 3)" train $k --steps 3 --warmup 9
echo "the optimizer's knobs: taken, checked on resume, their ranges said"
# --dropout: in train's help, its range said, GPT-2 only (resume: tests/resume.sh)
"$sinter" train --help | grep -q -- "--dropout P" || fail "train --help lacks --dropout"
# shellcheck disable=SC2086
refused 2 "--dropout wants" train $k --dropout 1
# shellcheck disable=SC2086
refused 1 "--dropout with a LLaMA-family model is not supported yet" train $k --model llama-tiny --tokenizer bytes --dropout 0.1
echo "--dropout: in --help, its range, GPT-2 only"
