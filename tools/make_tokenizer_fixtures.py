#!/usr/bin/env python3
"""make_tokenizer_fixtures.py: the tokenizer.json fixtures of tests/test_tokenizer_hf.c, made with
Hugging Face's `tokenizers` (pip install tokenizers): small byte-level BPE models trained on the
first 60 kB of assets/tinyshakespeare.txt with each pre-tokenizer sinter reads (GPT-2's ByteLevel;
Digits + ByteLevel as SmolLM; Llama 3's Split + ByteLevel, ignore_merges), and the ids the
library gives tests/fixtures/tokenizers/sample.txt, which sinter must reproduce exactly.
Then SentencePiece's byte-fallback kind laid out as TinyLlama's and Llama 2's tokenizer.json
(<unk> <s> </s>, <0x00>..<0xFF>, then the learned tokens; the normalizer form and the newer
Metaspace form): each with cases.txt, texts and the library's ids and decoded text.

    python3 tools/make_tokenizer_fixtures.py   # rewrites tests/fixtures/tokenizers/*
"""
import json
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


SP = "\u2581"
SP_CASES = ["Hello world", "First Citizen:\nBefore we proceed any further, hear me speak.",
            " one leading space", "  two leading spaces", "trailing space ", "  many   spaces   inside  ",
            "line one\nline two\n\nafter a blank line\n", "\ttabs\tand\r\nCRLF", " ", "   ", "\n",
            "Numbers 1234567 and 3.14159, 2026-11-27.", "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
            "\u4e2d\u6587 \u6c49\u5b57 \u65e5\u672c\u8a9e", "Emoji \U0001F600\U0001F44D\U0001F3FD ok \u2764\ufe0f \U0001F468\u200d\U0001F469",
            "zebra quartz \U0001D518 \x01 control \u00ff\u0100", "", "<s>Hello</s>", "<s> Hello", "x<unk>y",
            "</s></s> after", "Hello</s>world", "\u2581already marked", "ALL CAPS SHOUTING, THOU KNAVE!",
            "Greek \u03a9\u03bc\u03ad\u03b3\u03b1, Cyrillic \u041f\u0440\u0438\u0432\u0435\u0442",
            "\U0001F600\ud55c\U0001F600x \U0001F600\u4e2d\U0001F600 \U0001F600\U0001F600\u00e9\U0001F44D zebra\U0001F600"]


def sp_train():
    """A BPE trained like SentencePiece's (words start at a space as SP), alphabet limited so that
    rarer characters fall back to bytes: its learned tokens and merges."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=620, min_frequency=2, show_progress=False, limit_alphabet=90,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    with open(os.path.join(ROOT, "assets", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read(60000)
    extra = ("Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00e9t\u00e9 \u00e0 la fa\u00e7on " * 20 +
             "\u4e2d\u6587 \u4e2d\u56fd " * 10 + " 2026 1234 3.14 " * 20)
    parts = [text[i:i + 2000] for i in range(0, len(text), 2000)] + [extra]
    tok.train_from_iterator(parts, trainer)
    d = json.loads(tok.to_str())
    learned = sorted(((i, t) for t, i in d["model"]["vocab"].items() if i >= 3))
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    # tokens across a word's start, as Llama 2's runs of spaces: only an unsplit text merges them
    learned = [t for _, t in learned]
    for a, b in [(SP, SP), (SP + SP, SP + SP), (",", SP), (".", SP)]:
        merges.insert(len(merges) // 2, a + " " + b)
        learned.append(a + b)
    return learned, merges


def sp_make(name, learned, merges, normalizer, pre, decoder, byte_fallback=True, fuse_unk=True,
            missing_byte=None):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        if b != missing_byte:
            vocab["<0x%02X>" % b] = len(vocab)
    for t in learned:
        vocab.setdefault(t, len(vocab))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                      {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
         "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post, "decoder": decoder,
         "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": fuse_unk, "byte_fallback": byte_fallback,
                   "vocab": vocab, "merges": merges}}
    tok = Tokenizer.from_str(json.dumps(j))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(OUT, "sample.txt"), encoding="utf-8", newline="") as f:
        cases = SP_CASES + [f.read()]
    ids_of = {t: i for t, i in vocab.items()}
    # decoding alone: a BOS, byte runs that are not UTF-8, a lone SP, unk, EOS
    hello = tok.encode("Hello", add_special_tokens=False).ids
    b = lambda x: vocab["<0x%02X>" % x]
    dec_only = [[1] + hello, [b(0xE4), b(0xB8)], [b(0xE4), b(0xB8), b(0xAD), b(0x41), b(0x80)],
                [ids_of[SP]] * 2, [0, 0, 2], hello + [b(0xC3)] + hello, [2, ids_of[SP]] + hello]
    with open(os.path.join(d, "cases.txt"), "w", encoding="utf-8") as f:
        f.write("# tools/make_tokenizer_fixtures.py: T the text's UTF-8 in hex (none: a case of decoding\n"
                "# alone), I Hugging Face's ids (add_special_tokens=False), D its decode(ids) in hex\n")
        for text in cases + [None] * len(dec_only):
            ids = tok.encode(text, add_special_tokens=False).ids if text is not None else dec_only.pop(0)
            dec = tok.decode(ids, skip_special_tokens=False)
            f.write("# %s\n" % (ascii(text)[:100] if text is not None else "decoding alone"))
            f.write("T %s\n" % (text.encode().hex() if text is not None else "-"))
            f.write("I %s\n" % " ".join(map(str, ids)))
            f.write("D %s\n" % dec.encode().hex())
    if name == "tinyllama":  # all of Shakespeare as one text: its id count and a hash of the ids
        with open(os.path.join(ROOT, "assets", "tinyshakespeare.txt"), encoding="utf-8") as f:
            ids = tok.encode(f.read(), add_special_tokens=False).ids
        h = 0xcbf29ce484222325
        for c in " ".join(map(str, ids)).encode():
            h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
        with open(os.path.join(d, "shakespeare.txt"), "w") as f:
            f.write("%d %016x\n" % (len(ids), h))
    print(f"{name}: {tok.get_vocab_size()} tokens, {len(cases)} texts")


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
    learned, merges = sp_train()
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SP}
    dec = [{"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
           {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]
    meta = lambda scheme, split: {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}
    # TinyLlama's and Llama 2's layout
    sp_make("tinyllama", learned, merges, {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SP}, replace]}, None, {"type": "Sequence", "decoders": dec})
    # the newer conversion (legacy=False): Metaspace, SP before the text's start only
    sp_make("metaspace", learned, merges, None, meta("first", False), {"type": "Sequence", "decoders": dec})
    # Metaspace splitting at each SP, before every piece; a decoder without Strip
    sp_make("metaspace_split", learned, merges, None, meta("always", True),
            {"type": "Sequence", "decoders": dec[:3]})
    # no byte fallback: characters outside the vocabulary are one fused <unk>; no SP prepended
    sp_make("unk", learned, merges, None, meta("never", True), {"type": "Sequence", "decoders": dec},
            byte_fallback=False)
    # Metaspace's own decoder: the first token's SP dropped, byte tokens left as they are spelled
    sp_make("metaspace_decoder", learned, merges, None, meta("first", False), meta("first", False))
    # byte fallback without <0xF0>: an emoji is unk, and (as in tokenizers) byte tokens between
    # two unknown characters do not end the fused unk
    sp_make("gaps", learned, merges, {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SP}, replace]}, None, {"type": "Sequence", "decoders": dec},
        missing_byte=0xF0)


if __name__ == "__main__":
    main()
