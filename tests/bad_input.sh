#!/bin/sh
# bad_input.sh SINTER TRAIN_BENCH: bad input from the command line is refused at once with a
# message that names what was wrong and what to do: a FIFO given as a file (it used to hang),
# an option value out of range (named with its range), a corpus too small for a validation shard
# (which used to be written empty), unknown bench options (which used to run). A failed prepare
# leaves the previous shards as they were and no temporary files.
set -eu
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; } # the test changes directory
sinter=$(abs "$1")
bench=$(abs "$2")
dir=$(mktemp -d /tmp/sn_bad_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; [ -f err.txt ] && cat err.txt; exit 1; }
# refused CODE NEEDLE CMD...: CMD exits with CODE within 30 s and its stderr holds NEEDLE
refused() {
    code=$1 needle=$2; shift 2
    status=0
    timeout 30 "$@" > out.txt 2> err.txt || status=$?
    [ "$status" = 124 ] && fail "$* hung"
    [ "$status" = "$code" ] || fail "$* exited with $status, not $code"
    grep -qF -- "$needle" err.txt || fail "$* did not say: $needle"
}
seq 1 400 | awk '{ print "line " $1 }' > corpus.txt
tiny="--model tiny --batch 2 --seq 16 --steps 2 --sample-len 0"

# a FIFO with no writer: refused, not waited on
mkfifo fifo
# shellcheck disable=SC2086
refused 1 "cannot read fifo: it is a FIFO, not a regular file" "$sinter" train $tiny --data fifo
# shellcheck disable=SC2086
refused 1 "cannot read fifo: it is a FIFO, not a regular file" "$sinter" train $tiny --data corpus.txt --resume fifo --checkpoint c.ckpt
# shellcheck disable=SC2086
refused 1 "cannot read fifo: it is a FIFO, not a regular file: give --resume a checkpoint file" "$sinter" train $tiny --data corpus.txt --resume fifo
"$sinter" prepare --data corpus.txt --out good > /dev/null 2>&1
# shellcheck disable=SC2086
refused 1 "cannot read shard fifo: it is a FIFO" "$sinter" train $tiny --train-bin fifo --val-bin good_val.bin
mkdir bpe && mkfifo bpe/encoder.json bpe/vocab.bpe
refused 1 "bpe/encoder.json: it is a FIFO" "$sinter" prepare --data corpus.txt --bpe bpe --out x
echo "FIFOs refused"

# option values out of range name the option and its range
# shellcheck disable=SC2086
refused 2 "train: --steps wants a whole number from 1 to 100000000, not '0'" "$sinter" train $tiny --steps 0
refused 2 "train: --batch wants a whole number from 1 to 65536, not 'x'" "$sinter" train --batch x
refused 2 "train: --save-every wants a whole number from 0 to 100000000, not '-1'" "$sinter" train --save-every -1
refused 2 "train: --lr wants a number > 0 and < 10, not '0'" "$sinter" train --lr 0
refused 2 "train: --temperature wants a number >= 0 and < 100, not 'hot'" "$sinter" train --temperature hot
refused 2 "train: unknown option '--bogus'" "$sinter" train --bogus 1
echo "option values: named with their ranges"

# a corpus too small to give a validation shard: an error, and the old shards stay
cp good_train.bin keep_train.bin
cp good_val.bin keep_val.bin
printf 'hello\n' > small.txt
refused 1 "small.txt gives 6 tokens: --val-frac 0.1 leaves 6 for training and 0 for validation" \
    "$sinter" prepare --data small.txt --out good
cmp good_train.bin keep_train.bin && cmp good_val.bin keep_val.bin || fail "a failed prepare changed the shards"
ls | grep -q '\.tmp\.' && fail "temporary files left: $(ls)"
printf 'hello world, this is a small corpus\n' > small2.txt
"$sinter" prepare --data small2.txt --out small2 > /dev/null 2> err.txt || fail "prepare small2"
grep -qF "warning: only 3 validation tokens" err.txt || fail "no warning about 3 validation tokens"
# an unwritable --out fails before the corpus is read
refused 1 "cannot write the shard nodir/x_train.bin" "$sinter" prepare --data /nonexistent --out nodir/x
echo "prepare: tiny corpus refused, few validation tokens warned about, shards kept"

refused 2 "train_bench: unknown option '--bogus'" "$bench" --bogus
grep -qF "usage: train_bench" err.txt || fail "train_bench --bogus printed no usage"
refused 2 "train_bench: --batch wants an integer in 1..65536, not '0'" "$bench" --batch 0
refused 2 "train_bench: --steps needs a value" "$bench" --steps
echo "train_bench: unknown options and bad values refused with usage"
