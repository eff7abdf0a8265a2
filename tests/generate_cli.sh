#!/bin/sh
# generate_cli.sh SINTER: `sinter generate CHECKPOINT` on a tiny model trained here: the same greedy
# text on the CPU device and on the interpreter, a batch of two prompts whose rows are what each
# prompt gives alone, the linear weights in bf16 (--base bf16) alike on both, a LoRA checkpoint,
# the speed on stderr; and the refusals, each with exit
# status and message: no checkpoint, not a checkpoint, a truncated one, an empty prompt, a prompt
# longer than the model was trained on; past the trained length the window slides.
set -eu
. "$(dirname "$0")/cli_lib.sh" # $sinter, $dir (the working directory), fail, refused

"$sinter" train --model tiny --steps 40 --batch 8 --device cpu --checkpoint t.ckpt --sample-len 0 \
    --eval-every 0 > train.txt 2>&1 || { cat train.txt; fail "train"; }

g="generate t.ckpt --temperature 0 -n 20"
"$sinter" $g --prompt "ROMEO:" --device cpu > cpu.txt 2> err.txt || fail "generate on cpu"
grep -q "tokens/s" err.txt || fail "no tokens/s on stderr"
head -c 6 cpu.txt | grep -q "^ROMEO:" || fail "the prompt is not printed first"
[ "$(wc -c < cpu.txt)" -gt 7 ] || fail "nothing generated"
"$sinter" $g --prompt "ROMEO:" --device interp > interp.txt 2> err.txt || fail "generate on interp"
cmp -s cpu.txt interp.txt || fail "greedy text differs between cpu and interp"
echo "greedy generation: the same text on cpu and interp"

# --base bf16: the linear weights rounded to bf16 and read so (the base16 pass; the CPU's few-row
# product reads them widened), the same greedy text on the CPU device and the interpreter
"$sinter" $g --prompt "ROMEO:" --device cpu --base bf16 > cpu16.txt 2> err.txt || fail "generate --base bf16 on cpu"
grep -q ", the linear weights bf16;" err.txt || { cat err.txt; fail "--base bf16 not said"; }
"$sinter" $g --prompt "ROMEO:" --device interp --base bf16 > interp16.txt 2> err.txt || fail "generate --base bf16 on interp"
cmp -s cpu16.txt interp16.txt || fail "--base bf16: greedy text differs between cpu and interp"
refused 1 "--base nf4: t.ckpt has no NF4 base (a QLoRA checkpoint's, sinter train --qlora): leave out --base, or give --base bf16" \
    $g --prompt "ROMEO:" --device cpu --base nf4
echo "--base bf16: the same text on cpu and interp"

"$sinter" $g --prompt "JULIET:" --device cpu > alone.txt 2> err.txt || fail "second prompt alone"
"$sinter" $g -p "ROMEO:" -p "JULIET:" --device cpu > batch.txt 2> err.txt || fail "a batch of two"
grep -q "^--- prompt 2 ---$" batch.txt || fail "batch: no second row"
sed -n '/^--- prompt 2 ---$/,$p' batch.txt | tail -n +2 | cmp -s - alone.txt || fail "batch row 2 differs from the prompt alone"
echo "a batch of two prompts: each row is its prompt's text alone"

"$sinter" train --model tiny --steps 4 --batch 8 --device cpu --init t.ckpt --lora 4 --checkpoint l.ckpt \
    --sample-len 0 --eval-every 0 > train.txt 2>&1 || { cat train.txt; fail "LoRA train"; }
"$sinter" generate l.ckpt -n 10 --device cpu > out.txt 2> err.txt || fail "generate from a LoRA checkpoint"
echo "a LoRA checkpoint generates"

# past the 32 positions the model was trained on, the window slides: 40 new tokens after 6, the
# same on the CPU device and the interpreter, the first 27 those of a generation that fits
"$sinter" generate t.ckpt --temperature 0 -n 40 --prompt "ROMEO:" --device cpu > long.txt 2> err.txt ||
    fail "generation past the context"
"$sinter" generate t.ckpt --temperature 0 -n 40 --prompt "ROMEO:" --device interp > long_i.txt 2> err.txt ||
    fail "generation past the context on interp"
cmp -s long.txt long_i.txt || fail "past the context: cpu and interp differ"
"$sinter" generate t.ckpt --temperature 0 -n 27 --prompt "ROMEO:" --device cpu > fits.txt 2> err.txt ||
    fail "generation that fits"
[ "$(wc -c < long.txt)" -gt "$(wc -c < fits.txt)" ] || fail "past the context: no more text"
n=$(($(wc -c < fits.txt) - 1)) # tiny's tokens are bytes; the last byte is the newline
head -c "$n" fits.txt > fits_n.txt
head -c "$n" long.txt | cmp -s - fits_n.txt || fail "past the context: the first 27 tokens differ"
echo "past the trained length the window slides (cpu = interp)"

# nucleus sampling: a tiny nucleus is greedy whatever the seed; 0 is refused
"$sinter" generate t.ckpt -n 20 --prompt "ROMEO:" --top-p 1e-6 --seed 3 --device cpu > p1.txt 2> err.txt ||
    fail "generate --top-p"
"$sinter" generate t.ckpt -n 20 --prompt "ROMEO:" --top-p 1e-6 --seed 4 --device cpu > p2.txt 2> err.txt ||
    fail "generate --top-p, another seed"
cmp -s p1.txt cpu.txt && cmp -s p2.txt cpu.txt || fail "--top-p 1e-6 is not the greedy text"
refused 2 "--top-p wants a number > 0 and <= 1, not '0'" generate t.ckpt --top-p 0
echo "--top-p: a tiny nucleus is greedy"

# --hf: the checkpoint exported as a Hugging Face directory generates its greedy text
"$sinter" export t.ckpt --to hfdir > out.txt 2> err.txt || fail "export"
"$sinter" generate --hf hfdir --tokenizer bytes --temperature 0 -n 20 --prompt "ROMEO:" --device cpu \
    > hf.txt 2> err.txt || fail "generate --hf"
cmp -s hf.txt cpu.txt || fail "generate --hf differs from the checkpoint's text"
refused 2 "a checkpoint and --hf hfdir: give one of them" generate t.ckpt --hf hfdir
refused 2 "--context goes with --hf" generate t.ckpt --context 16
refused 1 "--context 64: hfdir's position table has 32 rows: give at most that" generate --hf hfdir --tokenizer bytes --context 64
echo "--hf: an exported checkpoint generates its text"

refused 2 "no checkpoint: give it first" generate --prompt x
refused 2 "unknown option '--bogus'" generate t.ckpt --bogus
refused 2 "--prompt 1 is empty" generate t.ckpt --prompt ""
refused 1 "is not a sinter checkpoint" generate train.txt
head -c 1000 t.ckpt > trunc.ckpt
refused 1 "is truncated" generate trunc.ckpt
refused 1 "cannot read" generate missing.ckpt
refused 1 "longer than the sequences of 32 tokens the model was trained on: shorten it" \
    generate t.ckpt --prompt "0123456789012345678901234567890123456789" --device cpu
echo "refused with a message: no checkpoint, not one, truncated, empty prompt, too long"
