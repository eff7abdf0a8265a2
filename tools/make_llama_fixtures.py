#!/usr/bin/env python3
"""make_llama_fixtures.py: the LLaMA-family fixtures of tests/test_hf_llama.c, made by
transformers (run by hand; the tests never need Python): tiny models with random weights saved
by save_pretrained, and the logits transformers computes on a fixed token sequence for each.

  llama/   LlamaForCausalLM, untied head, plain rotary embeddings, 4 heads sharing 2 kv heads
  llama3/  LlamaForCausalLM, tied head, llama3 rope scaling (every branch of its ramp is used)
  qwen2/   Qwen2ForCausalLM, tied head, q/k/v biases, sharded (model.safetensors.index.json)

    python3 -m venv v && v/bin/pip install torch transformers safetensors
    v/bin/python tools/make_llama_fixtures.py tests/fixtures/llama

Logits files as tools/make_hf_fixtures.py writes them: int32 magic 0x474c4e53 ("SNLG"),
version 1, T, V, tokens[T], then f32 logits (T, V), little-endian. Greedy files (NAME_greedy.bin):
int32 magic 0x52474e53 ("SNGR"), version 1, P, N, the prompt's P ids, then the N ids of
transformers' greedy generate (do_sample=False, use_cache=True), little-endian.
"""
import os
import struct
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/llama"
T = 16


def tokens(vocab):
    return [(i * 37 + 5) % vocab for i in range(T)]


def save(name, model, vocab, **kw):
    torch.manual_seed(0)
    with torch.no_grad():  # weights of every scale (the norms too), not transformers' ones
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if p.dim() == 1 and p.shape[0] == model.config.hidden_size else 0))
    model.eval()
    d = os.path.join(OUT, name)
    model.save_pretrained(d, safe_serialization=True, **kw)
    ids = tokens(vocab)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    assert logits.shape == (T, vocab)
    with open(os.path.join(OUT, name + "_logits.bin"), "wb") as f:
        f.write(struct.pack("<4i", 0x474C4E53, 1, T, vocab))
        f.write(struct.pack(f"<{T}i", *ids))
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    P, N = 4, 24
    with torch.no_grad():
        out = model.generate(torch.tensor([ids[:P]]), max_new_tokens=N, min_new_tokens=N, do_sample=False,
                             use_cache=True, pad_token_id=0)[0].tolist()
    assert out[:P] == ids[:P] and len(out) == P + N
    with open(os.path.join(OUT, name + "_greedy.bin"), "wb") as f:
        f.write(struct.pack("<4i", 0x52474E53, 1, P, N))
        f.write(struct.pack(f"<{P + N}i", *out))


def main():
    os.makedirs(OUT, exist_ok=True)
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                  attn_implementation="eager")
    torch.manual_seed(0)
    save("llama", LlamaForCausalLM(LlamaConfig(vocab_size=256, rope_theta=10000.0,
                                                tie_word_embeddings=False, **common)), 256)
    torch.manual_seed(0)
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
    save("llama3", LlamaForCausalLM(LlamaConfig(vocab_size=128, rope_theta=500000.0, rope_scaling=rs,
                                                 tie_word_embeddings=True, **common)), 128)
    torch.manual_seed(0)
    save("qwen2", Qwen2ForCausalLM(Qwen2Config(vocab_size=128, rope_theta=1000000.0,
                                               tie_word_embeddings=True, **common)), 128,
         max_shard_size="40KB")


if __name__ == "__main__":
    main()
