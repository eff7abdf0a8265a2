#!/usr/bin/env python3
"""make_tokenizer_fixtures.py: the tokenizer.json fixtures of tests/test_data.c, made with Hugging
Face's `tokenizers` (pip install tokenizers): small byte-level BPE models trained on the first
60 kB of assets/tinyshakespeare.txt with each pre-tokenizer sinter reads (GPT-2's ByteLevel;
Digits + ByteLevel as SmolLM; Llama 3's Split + ByteLevel, ignore_merges), and the ids the
library gives tests/fixtures/tokenizers/sample.txt, which sinter must reproduce exactly.

    python3 tools/make_tokenizer_fixtures.py   # rewrites tests/fixtures/tokenizers/*
"""
import os
from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SAMPLE = ("First Citizen:\nWe're all resolved rather to die than to famish? You'LL see, they'D "
          "know it.\n\n  \n\tIndented\t\ttabs  and   spaces   \r\nWindows line\r\n"
          "Numbers: 1, 12, 123, 1234, 12345 and 3.14159; 2026-11-27 at 19:45.\n"
          "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u03a9mega \u4e2d\u6587 "
          "\u2014 dash \u2026 quotes \u201cso\u201d.\n"
          "Emoji \U0001F600\U0001F44D\U0001F3FD ok \u2764\ufe0f \U0001F468\u200d\U0001F469 \u2192 arrows \u2713, "
          "\u3001\u300c\u5f15\u7528\u300d\u3002\n"
          "<|endoftext|>Second document<|endoftext|><|endoftext|> after two.\n"
          "Odd: ((brackets)) !!! ??? ... ''' \"quoted\" end   \n\n")


def make(name, pre, decoder, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    # trained with GPT-2's pattern, used with `pre`: merges across digits and case-folded
    # contractions then exist that only the right pre-tokenizer keeps apart
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoder
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|begin_of_text|>"])
    with open(os.path.join(ROOT, "assets", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read(60000)
    # digit runs, spaced numbers and upper-case contractions
    numbers = " ".join(f"{n} {n * 7}, {n * 31}.5 {n:04d}-{n % 12 + 1:02d}" for n in range(1, 400))
    shouting = "YOU'LL WE'RE THEY'D IT'S I'M WE'VE DON'T " * 50
    parts = [text[i:i + 2000] for i in range(0, len(text), 2000)] + [numbers, shouting]
    tok.train_from_iterator(parts, trainer)
    tok.pre_tokenizer = pre
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    ids = tok.encode(SAMPLE).ids
    assert tok.decode(ids, skip_special_tokens=False) == SAMPLE, name
    with open(os.path.join(d, "sample_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    print(f"{name}: {tok.get_vocab_size()} tokens, sample {len(ids)} ids")


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "sample.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(SAMPLE)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    make("gpt2", bl, decoders.ByteLevel())
    make("digits", pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl]),
         decoders.ByteLevel())
    make("llama3", pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        decoders.ByteLevel(), ignore_merges=True)


if __name__ == "__main__":
    main()
