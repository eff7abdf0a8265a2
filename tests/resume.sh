#!/bin/sh
# resume.sh SINTER: `sinter train` killed by SIGKILL (its own pid) at a random step between two
# checkpoints and resumed ends with a checkpoint byte-for-byte equal to an uninterrupted run's,
# with the same losses logged; killed during a save (SN_SAVEFILE_DELAY_MS holds the save before
# its rename), the previous checkpoint is intact and resumes to the same end. A truncated or
# mismatched checkpoint is refused with a message that names it. The kills land at a known step
# (SN_TRAIN_PAUSE_AFTER holds the run there: unheld, a warm tiny run could end between two looks
# at its log, as it once did). RESUME_ROUNDS=N repeats the two kills N times;
# RESUME_DEVICE=interp runs on the reference interpreter (no JIT compile per start; by hand:
# RESUME_ROUNDS=20 RESUME_DEVICE=interp sh tests/resume.sh build/sinter).
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
rounds=${RESUME_ROUNDS:-1}
device=${RESUME_DEVICE:-cpu}
dir=$(mktemp -d /tmp/sn_resume_XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -KILL $pid 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f"; tail -n 5 $f; }; done; exit 1; }
seq 1 6000 | awk '{ print "line " $1 ": the quick brown fox jumps over " ($1 * 7) % 13 " lazy dogs" }' > corpus.txt
steps=120 every=30
args="--model tiny --data corpus.txt --batch 2 --seq 16 --tokens-per-step 64 --steps $steps --lr 1e-3 --eval-every 30 --save-every $every --sample-len 0 --device $device"
losses() { cut -d, -f1-5 "$1"; } # step,loss,val_loss,lr,grad_norm (tokens/s differ)
# shellcheck disable=SC2086
"$sinter" train $args --log straight.csv --checkpoint straight.ckpt > straight.out
losses straight.csv > straight.cut

# bg ARGS...: sinter in the background; $pid is its own pid, written by the shell that execs it
# (a backgrounded shell function's $! would be a subshell, which SIGKILL would leave sinter
# running past)
bg() {
    rm -f pidfile
    # shellcheck disable=SC2086
    sh -c 'echo $$ > pidfile; exec "$@"' sh "$sinter" train $args "$@" > out.txt 2> err.txt &
    while [ ! -s pidfile ]; do sleep 0.01; done
    pid=$(cat pidfile)
}
last_step() { [ -s run.csv ] && tail -n 1 run.csv | cut -d, -f1 | grep -x '[0-9]*' || echo 0; }
# kills $pid with SIGKILL once COND holds, checking it died by that signal
kill_when() {
    while ! eval "$1"; do
        kill -0 $pid 2>/dev/null || fail "the run ended before: $1"
        sleep 0.005
    done
    kill -KILL $pid
    status=0
    wait $pid || status=$?
    pid=
    [ "$status" = 137 ] || fail "exit status $status, not 137 (SIGKILL)"
}
# resume_to_end STEP [OR_STEP]: run.ckpt, which must be at STEP (or OR_STEP), resumed to the end:
# same losses, same final checkpoint bytes
resume_to_end() {
    # shellcheck disable=SC2086
    "$sinter" train $args --log run.csv --resume run.ckpt > resumed.out 2> err.txt || fail "resume"
    at=$(sed -n 's/^resumed from run.ckpt at step \([0-9]*\)$/\1/p' resumed.out)
    [ -n "$at" ] && { [ "$at" = "$1" ] || [ "$at" = "${2:-$1}" ]; } ||
        fail "resumed at step '$at', not at step $1${2:+ or $2}"
    losses run.csv > run.cut
    cmp straight.cut run.cut || { diff straight.cut run.cut | head; fail "losses differ"; }
    cmp straight.ckpt run.ckpt || fail "final checkpoints differ"
}

r=0
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    rm -f run.ckpt run.csv run.*.tmp.* run.csv.failed
    # a random step between two saves (not a multiple of $every), after the first save and more
    # than $every steps before the end (the run must still be going when the kill lands, and
    # there must be a save after the checkpoint for the kill during a save)
    k=$(awk -v s="$(od -An -N4 -tu4 /dev/urandom)" -v n=$steps -v e=$every \
        'BEGIN { srand(s); do k = e + 1 + int(rand() * (n - 2 * e - 1)); while (k % e == 0); print k }')
    SN_TRAIN_PAUSE_AFTER=$k bg --log run.csv --checkpoint run.ckpt # held after step k
    kill_when '[ "$(last_step)" -ge '"$k"' ]'
    killed=$(last_step)
    [ "$killed" -lt "$steps" ] || fail "the run finished before it was killed"
    # the checkpoint is the last save before the kill; a step's log row is written before its
    # checkpoint, so a kill that lands just after a save step's row leaves the save before it
    saved=$(( killed / every * every )) or=
    [ $((killed % every)) -eq 0 ] && or=$((saved - every))
    echo "round $r: killed at step $killed (target $k); the checkpoint is step $saved${or:+ or $or}"

    # resumed, and killed during its next save: the checkpoint file is still the one it resumed
    # from, byte for byte
    cp run.ckpt prev.ckpt
    SN_SAVEFILE_DELAY_MS=60000 bg --log run.csv --resume run.ckpt
    kill_when 'ls run.ckpt.tmp.* > /dev/null 2>&1'
    cmp run.ckpt prev.ckpt || fail "a kill during the save changed the checkpoint"
    rm -f run.*.tmp.* # what a SIGKILL cannot clean up
    echo "round $r: killed during the next save: the checkpoint intact"

    resume_to_end $saved $or
    echo "round $r: resumed from step $at: same losses and the same final checkpoint bytes as the uninterrupted run"
done

expect_refused() { # expect_refused NEEDLE ARGS...: the run fails and stderr holds NEEDLE
    needle=$1; shift
    # shellcheck disable=SC2086
    if "$sinter" train $args "$@" > /dev/null 2> err.txt; then echo "FAIL: $* was accepted"; exit 1; fi
    grep -q -- "$needle" err.txt || { echo "FAIL: $* said:"; cat err.txt; exit 1; }
}
head -c 1000 run.ckpt > cut.ckpt
expect_refused "checkpoint cut.ckpt is truncated" --resume cut.ckpt
expect_refused "batch is 2 there, 4 here" --resume run.ckpt --batch 4 --tokens-per-step 128
expect_refused "model is tiny there, demo here" --resume run.ckpt --model demo
expect_refused "train.lr is 0.00100000005 there, 0.00200000009 here" --resume run.ckpt --lr 2e-3
echo "bad checkpoints refused"

# dropout: its masks come from (seed, step, micro-batch), so a run with --dropout killed after a
# save and resumed ends as the uninterrupted one (losses and checkpoint bytes); the probability
# is in the checkpoint, and a resume with another one, or none, is refused naming it
cp straight.cut nodrop.cut
args="$args --dropout 0.2"
# shellcheck disable=SC2086
"$sinter" train $args --log straight.csv --checkpoint straight.ckpt > straight.out
losses straight.csv > straight.cut
cmp -s nodrop.cut straight.cut && fail "--dropout 0.2 changed no loss"
rm -f run.ckpt run.csv
SN_TRAIN_PAUSE_AFTER=$((every + 2)) bg --log run.csv --checkpoint run.ckpt
kill_when '[ "$(last_step)" -ge '"$((every + 2))"' ]'
killed=$(last_step)
saved=$(( killed / every * every )) or=
[ $((killed % every)) -eq 0 ] && or=$((saved - every))
resume_to_end $saved $or
expect_refused "train.dropout is 0.200000003 there, 0.100000001 here" --resume run.ckpt --dropout 0.1
args=$(echo "$args" | sed 's/ --dropout 0.2//')
expect_refused "it has train.dropout = 0.200000003, which this run does not set" --resume run.ckpt
echo "dropout: resumed from step $at as the uninterrupted run; another probability refused"

# --mem: a resumed run keeps the micro-batch it was saved with (another would change its sums),
# whatever the budget (with --mem auto, the device's free memory) would choose alone: saved
# at 760 KiB (micro-batch 1 x 4), resumed at 900 KiB (alone: micro-batch 4), it ends as the
# uninterrupted run; a budget the saved micro-batch does not fit is refused naming it
if [ "$device" != interp ]; then
    args="--model tiny --data corpus.txt --batch 4 --seq 16 --steps 40 --lr 1e-3 --eval-every 10 --save-every 10 --sample-len 0 --device $device"
    # shellcheck disable=SC2086
    "$sinter" train $args --mem 760KiB --log straight.csv --checkpoint straight.ckpt > straight.out
    grep -q "^choice: micro-batch 1 x 4 " straight.out || fail "--mem 760KiB's plan: $(grep '^choice' straight.out)"
    # shellcheck disable=SC2086
    "$sinter" train $args --mem 900KiB --steps 1 > alone.out
    grep -q "^choice: micro-batch 4 x 1 " alone.out || fail "--mem 900KiB's plan: $(grep '^choice' alone.out)"
    losses straight.csv > straight.cut
    rm -f run.ckpt run.csv
    SN_TRAIN_PAUSE_AFTER=12 bg --mem 760KiB --log run.csv --checkpoint run.ckpt
    kill_when '[ "$(last_step)" -ge 12 ]'
    args="$args --mem 900KiB"
    resume_to_end 10
    grep -q "^choice: micro-batch 1 x 4 " resumed.out || fail "the resumed plan: $(grep '^choice' resumed.out)"
    args=$(echo "$args" | sed 's/ --mem 900KiB/ --mem 300KiB/')
    expect_refused "run.ckpt was saved at micro-batch 1, which a resumed run keeps: plan: nothing fits in 300.0 KiB" --resume run.ckpt
    echo "--mem: resumed from step $at at another budget with the saved micro-batch, as the uninterrupted run"
fi
