#!/bin/sh
# resume.sh SINTER: `sinter train` killed (SIGKILL) after its first checkpoint and resumed from
# it logs the same losses, step for step and bit for bit, as a run that was never interrupted;
# a truncated or mismatched checkpoint is refused with a message that names it.
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
dir=$(mktemp -d /tmp/sn_resume_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
seq 1 6000 | awk '{ print "line " $1 ": the quick brown fox jumps over " ($1 * 7) % 13 " lazy dogs" }' > corpus.txt
run() { "$sinter" train --model tiny --data corpus.txt --batch 2 --seq 16 --tokens-per-step 64 \
    --steps 300 --lr 1e-3 --eval-every 50 --save-every 50 --sample-len 0 "$@"; }
losses() { cut -d, -f1-5 "$1"; } # step,loss,val_loss,lr,grad_norm (tokens/s differ)

run --log straight.csv --checkpoint straight.ckpt > straight.out

run --log resumed.csv --checkpoint run.ckpt > killed.out &
pid=$!
while [ ! -f run.ckpt ]; do
    kill -0 $pid 2>/dev/null || { echo "FAIL: the run ended before its first checkpoint"; exit 1; }
    sleep 0.01
done
kill -KILL $pid
wait $pid 2>/dev/null || true
last=$(tail -n 1 resumed.csv | cut -d, -f1)
[ "$last" -lt 300 ] || { echo "FAIL: the run finished before it was killed"; exit 1; }
echo "killed at step $last"

run --log resumed.csv --resume run.ckpt > resumed.out
grep -q "resumed from run.ckpt at step" resumed.out
losses straight.csv > straight.cut
losses resumed.csv > resumed.cut
cmp straight.cut resumed.cut || { diff straight.cut resumed.cut | head; echo "FAIL: losses differ"; exit 1; }
echo "300 steps: the resumed run's losses equal the uninterrupted run's"
cmp straight.ckpt run.ckpt || { echo "FAIL: final checkpoints differ"; exit 1; }

expect_refused() { # expect_refused NEEDLE ARGS...: the run fails and stderr holds NEEDLE
    needle=$1; shift
    if run "$@" > /dev/null 2> err.txt; then echo "FAIL: $* was accepted"; exit 1; fi
    grep -q -- "$needle" err.txt || { echo "FAIL: $* said:"; cat err.txt; exit 1; }
}
head -c 1000 run.ckpt > cut.ckpt
expect_refused "checkpoint cut.ckpt is truncated" --resume cut.ckpt
expect_refused "batch is 2 there, 4 here" --resume run.ckpt --batch 4 --tokens-per-step 128
expect_refused "model is tiny there, demo here" --resume run.ckpt --model demo
expect_refused "train.lr is 0.00100000005 there, 0.00200000009 here" --resume run.ckpt --lr 2e-3
echo "bad checkpoints refused"
