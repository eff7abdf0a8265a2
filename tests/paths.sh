#!/bin/sh
# paths.sh SINTER: nothing of the user's is lost (issue 19). The same file given to two options,
# or an output that is an input, is refused before any work naming both; an output replaces only
# a file of its own kind (or with --overwrite), keeps the old file's mode, writes through a
# symbolic link; 250-byte names work; LOG.failed never replaces a file; a killed save's stale
# temporaries are removed by the next run (not a locked one); prepare replaces both shards or
# neither and cleans up on SIGTERM; numeric options out of their type's range, plan and train
# agreeing on --lora-alpha, --init of LoRA adapters at another alpha, and the messages that
# misled (a NaN checkpoint given to --resume, --init's advice, a directory given as --resume).
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
dir=$(mktemp -d /tmp/sn_paths_XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -KILL $pid 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -n 5 $f; }; done; exit 1; }
# refused CODE NEEDLE CMD...: CMD exits with CODE and its stderr holds NEEDLE
refused() {
    code=$1 needle=$2; shift 2
    status=0
    timeout 60 "$@" > out.txt 2> err.txt || status=$?
    [ "$status" = "$code" ] || fail "$* exited with $status, not $code"
    grep -qF -- "$needle" err.txt || fail "$* did not say: $needle"
}
seq 1 400 | awk '{ print "line " $1 }' > corpus.txt
cp corpus.txt corpus.keep
t="--model tiny --batch 2 --seq 16 --steps 2 --sample-len 0 --device interp --data corpus.txt"

# ---- the same file for two options, an output that is an input ----
echo "kept" > same.out
# shellcheck disable=SC2086
refused 2 "train: --checkpoint same.out and --log same.out are the same file: one output would overwrite the other" \
    "$sinter" train $t --checkpoint same.out --log same.out
[ "$(cat same.out)" = kept ] || fail "same.out changed"
# shellcheck disable=SC2086
refused 2 "train: --checkpoint ./corpus.txt and --data corpus.txt are the same file: the checkpoint would replace the training corpus read from it: give --checkpoint another path" \
    "$sinter" train $t --checkpoint ./corpus.txt
# shellcheck disable=SC2086
refused 2 "--checkpoint p.png and --plot ../$(basename "$dir")/p.png are the same file" \
    "$sinter" train $t --plot "../$(basename "$dir")/p.png" --checkpoint p.png
ln -s corpus.txt corpus.link
# shellcheck disable=SC2086
refused 2 "--log corpus.link and --data corpus.txt are the same file" "$sinter" train $t --log corpus.link
cmp corpus.txt corpus.keep || fail "the corpus changed"
"$sinter" prepare --data corpus.txt --out v > /dev/null 2>&1 || fail "prepare v"
cp v_train.bin v_train.keep
refused 2 "prepare: --out v_train.bin and --data v_train.bin are the same file: the training shard would replace the corpus read from it" \
    "$sinter" prepare --data v_train.bin --out v
cmp v_train.bin v_train.keep || fail "prepare replaced its input"
echo "same file twice: refused naming both options"

# ---- an output replaces only a file of its kind ----
echo "my notes" > notes.txt
# shellcheck disable=SC2086
refused 1 "--plot notes.txt: the file exists and is not a PNG plot" "$sinter" train $t --plot notes.txt
# shellcheck disable=SC2086
refused 1 "--log notes.txt: the file exists and is not a log" "$sinter" train $t --log notes.txt
# shellcheck disable=SC2086
refused 1 "--checkpoint notes.txt: the file exists and is not a checkpoint" "$sinter" train $t --checkpoint notes.txt
[ "$(cat notes.txt)" = "my notes" ] || fail "notes.txt changed"
cp notes.txt n2.txt
# shellcheck disable=SC2086
"$sinter" train $t --log n2.txt --overwrite > out.txt 2> err.txt || fail "--overwrite"
head -c 5 n2.txt | grep -q "step," || fail "--overwrite did not write the log"
cp notes.txt x_train.bin
refused 1 "--out x_train.bin: the file exists and is not a token shard" "$sinter" prepare --data corpus.txt --out x
cmp notes.txt x_train.bin || fail "prepare replaced a file that is no shard"
echo "other kinds of file: kept unless --overwrite"

# ---- modes, links, long names ----
# shellcheck disable=SC2086
(umask 077 && "$sinter" train $t --log m.csv > out.txt 2> err.txt) || fail "umask run"
[ "$(stat -c %a m.csv)" = 600 ] || fail "a new log under umask 077 is $(stat -c %a m.csv)"
chmod 640 m.csv
# shellcheck disable=SC2086
"$sinter" train $t --log m.csv > out.txt 2> err.txt || fail "second log run"
[ "$(stat -c %a m.csv)" = 640 ] || fail "the replaced log's mode became $(stat -c %a m.csv)"
mkdir real
ln -s real/k.ckpt link.ckpt
# shellcheck disable=SC2086
"$sinter" train $t --checkpoint link.ckpt > out.txt 2> err.txt || fail "symlinked checkpoint"
[ -L link.ckpt ] || fail "the symbolic link was replaced"
head -c 6 real/k.ckpt | grep -q SNCKPT || fail "the link's target is no checkpoint"
long=$(printf '%0246d' 0).ckpt # 250 bytes: its temporary name must fit too
# shellcheck disable=SC2086
"$sinter" train $t --checkpoint "$long" > out.txt 2> err.txt || fail "a 250-byte checkpoint name"
[ -f "$long" ] || fail "no $long"
echo "modes kept, links written through, 250-byte names"

# ---- LOG.failed, stale temporaries ----
echo "an older failure" > d.csv.failed
# shellcheck disable=SC2086
refused 1 "this run's rows are in d.csv.failed.2" "$sinter" train $t --steps 50 --lr 5 --log d.csv
[ "$(cat d.csv.failed)" = "an older failure" ] || fail "d.csv.failed was replaced"
grep -q "start afresh with a lower --lr" err.txt || fail "no advice after a divergence"
touch -d '1 hour ago' k.ckpt.tmp.aaaaaa k.ckpt.tmp.bbbbbb
rm -f holder
flock k.ckpt.tmp.bbbbbb sh -c 'echo $$ > holder; exec sleep 30' > /dev/null 2>&1 &
while [ ! -s holder ]; do sleep 0.05; done
pid=$(cat holder)
# shellcheck disable=SC2086
"$sinter" train $t --checkpoint k.ckpt > out.txt 2> err.txt || fail "run with stale temporaries"
grep -qF "removed 1 temporary file of --checkpoint k.ckpt (k.ckpt.tmp.*) left by a run that was killed while saving" err.txt ||
    fail "no word of the stale temporary"
[ ! -e k.ckpt.tmp.aaaaaa ] || fail "the stale temporary is still there"
[ -e k.ckpt.tmp.bbbbbb ] || fail "a locked temporary was removed"
kill $pid 2>/dev/null || true
pid=
rm -f k.ckpt.tmp.bbbbbb
echo "LOG.failed kept, stale temporaries removed"

# ---- prepare: both shards or neither; SIGTERM cleans up ----
cp v_val.bin v_val.keep
mkdir w_val.bin
cp v_train.bin w_train.bin
refused 1 "cannot rename the shard w_val.bin" "$sinter" prepare --data notes.txt --val-frac 0.5 --out w
cmp w_train.bin v_train.keep || fail "the train shard was replaced though the val shard was not"
ls | grep -q '\.tmp\.' && fail "temporaries left: $(ls)"
SN_SAVEFILE_DELAY_MS=5000 "$sinter" prepare --data notes.txt --val-frac 0.5 --out v > out.txt 2> err.txt &
pid=$!
while ! ls | grep -q 'v_val.bin.tmp'; do sleep 0.05; done
kill -TERM $pid
status=0
wait $pid || status=$?
pid=
[ "$status" = 143 ] || fail "prepare after SIGTERM exited $status"
ls | grep -q '\.tmp\.' && fail "temporaries left after SIGTERM: $(ls)"
cmp v_train.bin v_train.keep && cmp v_val.bin v_val.keep || fail "SIGTERM changed the shards"
echo "prepare: a failed rename keeps both old shards, SIGTERM leaves no temporaries"

# ---- numbers in their type's range; plan and train agree ----
refused 1 "--tokens-per-step 4294967297 is 4294967297 micro-batches of batch x seq = 1 tokens a step, more than 1048576" \
    "$sinter" train --model tiny --device interp --data corpus.txt --batch 1 --seq 1 --tokens-per-step 4294967297 --steps 1
refused 2 "plan: --lora-alpha wants a number > 0 and < 1e6, not '8xyz'" "$sinter" plan --model tiny --mem 1GiB --lora 4 --lora-alpha 8xyz
refused 2 "train: --lora-alpha wants a number > 0 and < 1e6, not '8xyz'" "$sinter" train --lora 4 --lora-alpha 8xyz
refused 2 "plan: --lora-alpha and --lora-targets shape LoRA adapters: add --lora R" "$sinter" plan --model tiny --mem 1GiB --lora-alpha 8
refused 2 "train: --lora-alpha and --lora-targets shape LoRA adapters: add --lora R" "$sinter" train --lora-alpha 8
echo "numbers: ranges of their types; plan and train agree"

# ---- LoRA: --init at another alpha; a rank as large as the layer; tf32 on the CPU ----
# shellcheck disable=SC2086
"$sinter" train $t --lora 4 --lora-alpha 8 --checkpoint l.ckpt > out.txt 2> err.txt || fail "LoRA run"
# shellcheck disable=SC2086
refused 1 "holds LoRA adapters trained as ctx 32, 2 layers, 2 heads, 32 channels, LoRA rank 4 alpha 8 on all; this run is ctx 32, 2 layers, 2 heads, 32 channels, LoRA rank 4 alpha 64 on all" \
    "$sinter" train $t --init l.ckpt --lora 4 --lora-alpha 64
# shellcheck disable=SC2086
"$sinter" train $t --init l.ckpt --lora 4 --lora-alpha 8 > out.txt 2> err.txt || fail "--init at the saved alpha"
# shellcheck disable=SC2086
"$sinter" train $t --lora 32 --precision tf32 > out.txt 2> err.txt || fail "rank 32"
grep -qF "warning: --lora 32 is at least the adapted layers' smaller side (32 channels)" err.txt || fail "no rank warning"
grep -qF "precision: tf32 (TF32 is a CUDA tensor-core mode: on this device it means fp32)" out.txt || fail "tf32 on the CPU not explained"
# shellcheck disable=SC2086
refused 1 "start again from --init real/k.ckpt with a lower --lr (this run: 5)" \
    "$sinter" train $t --steps 50 --lr 5 --init real/k.ckpt
echo "LoRA: --init at another alpha refused, large ranks warned about, tf32 on the CPU explained"

# ---- messages that misled ----
# shellcheck disable=SC2086
refused 1 "cannot read real: it is a directory, not a regular file: give --resume a checkpoint file" "$sinter" train $t --resume real
# a checkpoint with a NaN weight (CRC-32 made to agree: gzip's trailer holds it), given to --resume
# shellcheck disable=SC2086
"$sinter" train $t --checkpoint nan.ckpt > out.txt 2> err.txt || fail "nan.ckpt"
at=$(grep -obUa "wte" nan.ckpt | head -n 1 | cut -d: -f1)
printf '\377\377\377\177' | dd of=nan.ckpt bs=1 seek=$((at + 31)) conv=notrunc 2> /dev/null
tail -c +33 nan.ckpt | gzip -c | tail -c 8 | head -c 4 | dd of=nan.ckpt bs=1 seek=24 conv=notrunc 2> /dev/null
# shellcheck disable=SC2086
refused 1 "holds a NaN or infinite value" "$sinter" train $t --resume nan.ckpt
grep -q "last good checkpoint" err.txt && fail "a NaN checkpoint called the last good one"
grep -q "lower --lr" err.txt && fail "a checkpoint that does not load met advice about --lr"
echo "messages: a directory is no input, a NaN checkpoint is not the last good one"
