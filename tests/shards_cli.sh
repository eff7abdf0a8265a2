#!/bin/sh
# shards_cli.sh SINTER: --train-bin and --val-bin as glob patterns over many llm.c shards: three
# shards by pattern train to the same losses, bit for bit, as one shard of their concatenation;
# the startup line counts the shards; a pattern matching nothing, a match that is no shard, an id
# outside the vocabulary and an output that is one of the matches are refused naming the pattern
# or the shard; a resume with a shard removed or changed is refused, naming the shards' count;
# the help shows the pattern form.
set -eu
. "$(dirname "$0")/cli_lib.sh" # $sinter, $dir (the working directory), fail, refused

# le32 N: N as four little-endian bytes
le32() {
    printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 & 255)) $(($1 >> 8 & 255)) \
        $(($1 >> 16 & 255)) $(($1 >> 24 & 255)))"
}
header() { le32 20240520; le32 1; le32 "$1"; head -c 1012 /dev/zero; }
# piece OUT FIRST COUNT: a shard of the ids [FIRST, FIRST + COUNT) of all_train.bin
piece() { { header "$3"; tail -c +$((1025 + 2 * $2)) all_train.bin | head -c $((2 * $3)); } > "$1"; }

seq 1 3000 | awk '{ print "record " $1 " says " ($1 * 31) % 97 }' > corpus.txt
"$sinter" prepare --data corpus.txt --out all > /dev/null
n=$(od -An -tu4 -j8 -N4 all_train.bin | tr -d ' ')
a=$((n / 3)) b=$((n / 2))
mkdir parts
piece parts/train_000001.bin 0 $a
piece parts/train_000002.bin $a $((b - a))
piece parts/train_000003.bin $b $((n - b))
piece whole.bin 0 "$n"
cmp whole.bin all_train.bin || fail "the shard writer of this test"

run() { "$sinter" train --model tiny --batch 2 --seq 16 --steps 20 --eval-every 10 --sample-len 0 "$@"; }
run --train-bin all_train.bin --val-bin all_val.bin --log one.csv > one.out
run --train-bin 'parts/train_*.bin' --val-bin 'all_v?l.bin' --log three.csv > three.out
cut -d, -f1-5 one.csv > one.cut
cut -d, -f1-5 three.csv > three.cut
cmp one.cut three.cut || { diff one.cut three.cut | head; fail "three shards and their concatenation train differently"; }
grep -qF "$n training tokens from 3 shards (parts/train_*.bin) /" three.out || fail "startup line: $(head -n 3 three.out)"
grep -qF "validation tokens from 1 shard (all_v?l.bin)" three.out || fail "startup line: $(head -n 3 three.out)"
echo "three shards by pattern: the same losses as their concatenation"

refused 1 "no file matches the shard pattern nothing/train_*.bin" \
    train --model tiny --train-bin 'nothing/train_*.bin' --val-bin all_val.bin
mkdir parts/train_000004.bin
refused 1 "cannot read shard parts/train_000004.bin: it is a directory" \
    train --model tiny --train-bin 'parts/train_*.bin' --val-bin all_val.bin
grep -qF "it matched the shard pattern parts/train_*.bin" err.txt || fail "the pattern is not named"
rmdir parts/train_000004.bin
mkdir wide
{ header 2; printf '\001\000\377\377'; } > wide/train_2.bin
cp parts/train_000001.bin wide/train_1.bin
refused 1 "wide/train_2.bin: token 1: expected an id < vocab 256, found 65535" \
    train --model tiny --train-bin 'wide/train_*.bin' --val-bin all_val.bin
refused 2 "--checkpoint parts/train_000002.bin and --train-bin parts/train_*.bin (its match parts/train_000002.bin) are the same file: the checkpoint would replace the training shard" \
    train --model tiny --train-bin 'parts/train_*.bin' --val-bin all_val.bin --checkpoint parts/train_000002.bin
echo "refused: a pattern matching nothing, a directory matched, an id outside the vocabulary, an output among the matches"

run --train-bin 'parts/train_*.bin' --val-bin all_val.bin --steps 20 --checkpoint run.ckpt > /dev/null
mv parts/train_000002.bin kept.bin
refused 1 "train_data is 3 shards, $n tokens" train --model tiny --batch 2 --seq 16 --steps 20 \
    --eval-every 10 --sample-len 0 --train-bin 'parts/train_*.bin' --val-bin all_val.bin --resume run.ckpt
grep -qF "there, 2 shards, $((n - b + a)) tokens" err.txt || fail "the shards here are not counted"
cp kept.bin parts/train_000002.bin
printf '\001' | dd of=parts/train_000002.bin bs=1 seek=1030 conv=notrunc 2> /dev/null
refused 1 "train_data is 3 shards, $n tokens, hash" train --model tiny --batch 2 --seq 16 --steps 20 \
    --eval-every 10 --sample-len 0 --train-bin 'parts/train_*.bin' --val-bin all_val.bin --resume run.ckpt
mv kept.bin parts/train_000002.bin
run --train-bin 'parts/train_*.bin' --val-bin all_val.bin --steps 20 --resume run.ckpt > resumed.out ||
    fail "the same shards do not resume"
echo "resume: a shard removed or changed refused, the same shards resumed"

"$sinter" train --help > help.txt
grep -qF -- "--train-bin 'data/fineweb_train_*.bin'" help.txt || fail "the help has no pattern form"
echo "help: the pattern form"
