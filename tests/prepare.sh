#!/bin/sh
# prepare.sh SINTER: `sinter prepare` writes llm.c shards of a corpus, and training on them
# (--train-bin/--val-bin) logs the same losses as training on the text itself (same split).
set -eu
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the test changes directory
dir=$(mktemp -d /tmp/sn_prepare_XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
seq 1 3000 | awk '{ print "record " $1 " says " ($1 * 31) % 97 }' > corpus.txt
"$sinter" prepare --data corpus.txt --out shards > prepare.out
grep -q "shards_train.bin" prepare.out
[ "$(head -c 4 shards_train.bin | od -An -tu4 | tr -d ' ')" = 20240520 ] || { echo "FAIL: shard magic"; exit 1; }
run() { "$sinter" train --model tiny --batch 2 --seq 16 --steps 30 --eval-every 10 --sample-len 20 \
    --plot loss.png "$@"; }
run --data corpus.txt --log text.csv > text.out
run --train-bin shards_train.bin --val-bin shards_val.bin --log bin.csv > bin.out
cut -d, -f1-5 text.csv > text.cut
cut -d, -f1-5 bin.csv > bin.cut
cmp text.cut bin.cut || { diff text.cut bin.cut | head; echo "FAIL: shard and text runs differ"; exit 1; }
grep -q -- "---- sample at step 30" bin.out || { echo "FAIL: no sample"; cat bin.out; exit 1; }
[ "$(head -c 8 loss.png | od -An -c | tr -d ' ')" = '211PNG\r\n032\n' ] || { echo "FAIL: loss.png"; exit 1; }
if "$sinter" train --train-bin shards_train.bin > /dev/null 2> err.txt; then exit 1; fi
grep -q "give both --train-bin and --val-bin" err.txt
echo "shards: same losses as the text; sample and plot written"
