#!/usr/bin/env python3
"""make_hf_fixtures.py: the pretrained-weight fixtures of tests/test_hf.c, made by transformers
(run by hand; the tests never need Python): a tiny GPT-2 with random weights saved by
save_pretrained (one model.safetensors, and sharded with an index), the same weights as llm.c's
bf16 model file (version 5, written as llm.c's train_gpt2.py writes it), and the logits
transformers computes on a fixed token sequence for each.

    python3 -m venv v && v/bin/pip install torch transformers safetensors
    v/bin/python tools/make_hf_fixtures.py tests/fixtures/hf

Logits files: int32 magic 0x474c4e53 ("SNLG"), version 1, T, V, tokens[T], then f32 logits
(T, V), little-endian.
"""
import os
import struct
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf"
T = 16
TOKENS = [(i * 37 + 5) % 96 for i in range(T)]


def logits_file(path, model, vocab):
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS])).logits[0].float()  # (T, V)
    assert logits.shape == (T, vocab)
    with open(path, "wb") as f:
        f.write(struct.pack("<4i", 0x474C4E53, 1, T, vocab))
        f.write(struct.pack(f"<{T}i", *TOKENS))
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())


def write_llmc_bf16(path, model, config):
    """llm.c's write_model(dtype="bfloat16"): header of 256 int32, then the tensors kind by kind
    in PyTorch nn.Linear layout (out, in), so GPT-2's Conv1D weights are transposed."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    L = config.n_layer
    V, C = sd["transformer.wte.weight"].shape
    Vp = (V + 127) // 128 * 128
    header = [0] * 256
    header[:8] = [20240326, 5, config.n_positions, V, L, config.n_head, C, Vp]
    wte = torch.zeros(Vp, C)
    wte[:V] = sd["transformer.wte.weight"]

    def bf16(t):
        return t.contiguous().to(torch.bfloat16).view(torch.int16).numpy().tobytes()

    conv = ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"]
    kinds = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(bf16(wte))
        f.write(bf16(sd["transformer.wpe.weight"]))
        for k in kinds:
            for i in range(L):
                t = sd[f"transformer.h.{i}.{k}"]
                f.write(bf16(t.t() if k in conv else t))
        f.write(bf16(sd["transformer.ln_f.weight"]))
        f.write(bf16(sd["transformer.ln_f.bias"]))


def main():
    torch.manual_seed(1234)
    config = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # every weight random and away from its init (ones, zeros)
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(os.path.join(OUT, "tiny"), safe_serialization=True)
    model.save_pretrained(os.path.join(OUT, "sharded"), safe_serialization=True, max_shard_size="50KB")
    for d in ("tiny", "sharded"):  # only what sinter reads
        g = os.path.join(OUT, d, "generation_config.json")
        if os.path.exists(g):
            os.remove(g)
    logits_file(os.path.join(OUT, "tiny_logits.bin"), model, config.vocab_size)

    write_llmc_bf16(os.path.join(OUT, "tiny_bf16.bin"), model, config)
    with torch.no_grad():  # what the bf16 file holds: every weight rounded to bf16
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    logits_file(os.path.join(OUT, "tiny_bf16_logits.bin"), model, config.vocab_size)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
