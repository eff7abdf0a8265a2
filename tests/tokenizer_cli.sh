#!/bin/sh
# tokenizer_cli.sh SINTER FIXTURES: a Hugging Face tokenizer.json from the command line (sinter
# train/prepare/generate --tokenizer-file): a tiny model trains with the fixtures' GPT-2-style
# tokenizer (vocabulary 700) on a text and on the shards `sinter prepare` made with it (the same
# losses); the checkpoint records the file's hash: a resume or a generate with another
# tokenizer.json, or without one, is refused naming what to give; --tokenizer-file beside
# --tokenizer or --bpe is a usage error. Then SentencePiece's byte-fallback kind (the fixture laid
# out as TinyLlama's, vocabulary 880) on a text with characters it has no token for: trains,
# its hash recorded, generates.
set -eu
. "$(dirname "$0")/cli_lib.sh" # $sinter, $dir (the working directory), fail, refused
tok=$2/tokenizers/gpt2/tokenizer.json
other=$2/tokenizers/llama3/tokenizer.json
seq 1 2500 | awk '{ print "Line " $1 ": the quick brown fox, 1234 times, jumps over " ($1 * 7) % 13 " lazy dogs." }' > corpus.txt
t="train --model tiny --batch 4 --seq 32 --steps 6 --eval-every 3 --sample-len 0 --device cpu"

"$sinter" $t --data corpus.txt --tokenizer-file "$tok" --checkpoint t.ckpt --log t.csv > out.txt 2> err.txt ||
    fail "train with --tokenizer-file"
grep -q "hf tokenizer (vocab 700)" out.txt || fail "the startup line does not name the tokenizer: $(head -3 out.txt)"
echo "trained with a tokenizer.json (vocabulary 700)"

"$sinter" prepare --data corpus.txt --tokenizer-file "$tok" --out sh > prep.txt 2> err.txt || fail "prepare"
"$sinter" $t --train-bin sh_train.bin --val-bin sh_val.bin --tokenizer-file "$tok" --log s.csv > out.txt 2> err.txt ||
    fail "train on the prepared shards"
cut -d, -f2 t.csv > a.txt
cut -d, -f2 s.csv > b.txt
cmp -s a.txt b.txt || fail "the shards train to other losses than the text: $(paste a.txt b.txt | head -4)"
echo "prepare with it: the shards train to the same losses as the text"

refused 1 "tokenizer is hf 700" $t --data corpus.txt --tokenizer-file "$other" --resume t.ckpt
refused 1 "give that file with --tokenizer-file FILE" generate t.ckpt -n 4 --device cpu
refused 1 "is not the tokenizer t.ckpt was trained with" generate t.ckpt -n 4 --device cpu --tokenizer-file "$other"
"$sinter" generate t.ckpt -n 8 --device cpu --prompt "Line 7" --tokenizer-file "$tok" > gen.txt 2> err.txt ||
    fail "generate with the tokenizer.json"
head -c 6 gen.txt | grep -q "^Line 7" || fail "generate: the prompt is not printed first"
echo "the checkpoint holds the tokenizer's hash: another file refused on resume and in generate"

refused 2 "leave out --tokenizer" $t --data corpus.txt --tokenizer-file "$tok" --tokenizer bytes
refused 2 "leave out --bpe" prepare --data corpus.txt --tokenizer-file "$tok" --bpe . --out x
refused 1 "not a JSON object" $t --data corpus.txt --tokenizer-file corpus.txt
echo "--tokenizer-file with --tokenizer or --bpe refused; a file that is not one named"

sp=$2/tokenizers/tinyllama/tokenizer.json
awk '{ print $0 " Caf\303\251 \344\270\255\346\226\207 \360\237\230\200" }' corpus.txt > uni.txt
"$sinter" $t --data uni.txt --tokenizer-file "$sp" --checkpoint sp.ckpt --log sp.csv > out.txt 2> err.txt ||
    fail "train with a byte-fallback tokenizer.json"
grep -q "hf tokenizer (vocab 880)" out.txt || fail "the startup line does not name the tokenizer: $(head -3 out.txt)"
refused 1 "tokenizer is hf 880" $t --data uni.txt --tokenizer-file "$tok" --resume sp.ckpt
refused 1 "is not the tokenizer sp.ckpt was trained with" generate sp.ckpt -n 4 --device cpu --tokenizer-file "$tok"
"$sinter" generate sp.ckpt -n 8 --device cpu --prompt "$(printf 'Line 7 Caf\303\251')" --tokenizer-file "$sp" > gen.txt 2> err.txt ||
    fail "generate with the byte-fallback tokenizer.json"
head -c 6 gen.txt | grep -q "^Line 7" || fail "generate: the prompt is not printed first"
# the post-processor's <s> goes before the prompt: "the" is one token ("\u2581the"), the prefill two
"$sinter" generate sp.ckpt -n 2 --device cpu --prompt the --tokenizer-file "$sp" > /dev/null 2> err.txt ||
    fail "generate --prompt the"
grep -q "prefill of 2 prompt tokens" err.txt || fail "generate: no BOS before the prompt: $(tail -1 err.txt)"
echo "a byte-fallback tokenizer.json (TinyLlama's layout): trains, its hash in the checkpoint, generates, <s> before the prompt"
