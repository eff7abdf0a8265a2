#!/usr/bin/env python3
"""torch_gpt2.py: the PyTorch anchor of the GPU check (tools/gpu_check, docs/gpu.md): a plain GPT-2
124M training step, timed. Not part of sinter's build; needs only python3 with torch.

The model is written here, nanoGPT's way: learned position embeddings, 12 pre-LayerNorm blocks
(LayerNorm with bias, causal self-attention by F.scaled_dot_product_attention(is_causal=True),
MLP with GELU tanh), a final LayerNorm, the LM head tied to wte. The vocabulary is padded to
50304 (a multiple of 64, as sinter's pad_vocab pass and llm.c pad it); tokens are drawn from the
real 50257. A step: forward and cross-entropy under bf16 autocast (fp32 weights), backward, the
gradients' global norm clipped at 1.0, fused AdamW (lr 3e-4, betas 0.9/0.95, weight decay 0.1 on
the matrices), zero_grad -- the work of sinter's training step.

Modes: eager; compile (torch.compile, default mode); reduce-overhead (torch.compile with CUDA
graphs). The model with its loss is compiled; the clip and the fused optimizer run eagerly.
Each (mode, size): --warmup untimed steps (the compile happens there), then --steps timed with
CUDA events around each step; prints one JSON object a line:
  {"mode": "eager", "B": 16, "T": 1024, "ms_median": .., "ms_min": .., "ms_max": ..,
   "tokens_per_s": .., "peak_memory_bytes": .., "warmup_s": .., ...}
and for a mode that fails, {"mode": .., "B": .., "T": .., "error": "..."}, then goes on.

  python3 bench/torch_gpt2.py [--modes eager,reduce-overhead,compile] [--sizes 16x1024,4x256]
                              [--steps 10] [--warmup 3] [--device cuda] [--model gpt2|tiny]
"""
import argparse
import gc
import json
import math
import sys
import time
import traceback


def emit(obj):
    print(json.dumps(obj), flush=True)


def parse_sizes(text):
    sizes = []
    for item in text.split(","):
        b, t = item.lower().split("x")
        sizes.append((int(b), int(t)))
    return sizes


CONFIGS = {  # n_layer, n_head, n_embd, vocab (padded), real vocab, block size
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, vocab=50304, real_vocab=50257, block=1024),
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, vocab=512, real_vocab=500, block=256),
}


def build(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["n_embd"]
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.attn_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.gelu = nn.GELU(approximate="tanh")
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, C = x.shape
            H = cfg["n_head"]
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["n_embd"]
            self.wte = nn.Embedding(cfg["vocab"], C)
            self.wpe = nn.Embedding(cfg["block"], C)
            self.h = nn.ModuleList([Block() for _ in range(cfg["n_layer"])])
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, cfg["vocab"], bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            proj_std = 0.02 / math.sqrt(2 * cfg["n_layer"])
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() == 2:
                    nn.init.normal_(p, 0.0, proj_std if name.endswith("proj.weight") else 0.02)

        def forward(self, idx, targets):
            B, T = idx.shape
            pos = torch.arange(T, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def run_one(torch, args, cfg, mode, B, T):
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(1337)
    model = build(torch, cfg).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    fwd = model
    if mode == "compile":
        fwd = torch.compile(model)
    elif mode == "reduce-overhead":
        fwd = torch.compile(model, mode="reduce-overhead")
    elif mode != "eager":
        raise ValueError("unknown mode %r (eager, compile, reduce-overhead)" % mode)
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    params = list(model.parameters())
    gen = torch.Generator(device="cpu").manual_seed(42)
    batches = [torch.randint(0, cfg["real_vocab"], (B, T + 1), generator=gen) for _ in range(4)]
    batches = [(b[:, :-1].contiguous().to(dev), b[:, 1:].contiguous().to(dev)) for b in batches]

    def step(i):
        x, y = batches[i % len(batches)]
        if mode == "reduce-overhead" and mark is not None:
            mark()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss = None
    for i in range(args.warmup):
        loss = step(i)
    if cuda:
        torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    ms = []
    for i in range(args.steps):
        if cuda:
            ev = [torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)]
            ev[0].record()
            loss = step(args.warmup + i)
            ev[1].record()
            ev[1].synchronize()
            ms.append(ev[0].elapsed_time(ev[1]))
        else:
            t = time.perf_counter()
            loss = step(args.warmup + i)
            ms.append((time.perf_counter() - t) * 1e3)
    last = float(loss.detach().float().item()) if loss is not None else float("nan")
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    ms.sort()
    med = ms[len(ms) // 2]
    out = {"mode": mode, "B": B, "T": T, "model": args.model, "steps": len(ms),
           "ms_median": round(med, 4), "ms_min": round(ms[0], 4), "ms_max": round(ms[-1], 4),
           "tokens_per_s": round(B * T / (med / 1e3), 1), "peak_memory_bytes": int(peak),
           "warmup_s": round(warmup_s, 2), "loss_last": round(last, 4), "vocab_padded": cfg["vocab"],
           "device": torch.cuda.get_device_name(dev) if cuda else "cpu", "torch": torch.__version__}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="eager,reduce-overhead,compile")
    ap.add_argument("--sizes", default="16x1024,4x256", help="BxT,BxT,...")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="gpt2", choices=sorted(CONFIGS))
    args = ap.parse_args()
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError:
        ap.error("--sizes is BxT[,BxT...]")
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps at least 1, --warmup at least 0")
    try:
        import torch
    except Exception as ex:  # the caller says "skipped: no torch"
        emit({"error": "no torch: %s" % ex})
        return 3
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            emit({"error": "no torch: torch %s sees no CUDA device" % torch.__version__})
            return 3
        try:  # fp32 matmuls outside autocast as TF32 (nanoGPT's setting; none in this step)
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        except Exception:
            pass
    cfg = CONFIGS[args.model]
    failed = 0
    for mode in [m for m in args.modes.split(",") if m]:
        for B, T in sizes:
            try:
                if T > cfg["block"]:
                    raise ValueError("T=%d is over the model's block size %d" % (T, cfg["block"]))
                emit(run_one(torch, args, cfg, mode, B, T))
            except Exception as ex:
                failed += 1
                tb = traceback.format_exc().strip().splitlines()
                emit({"mode": mode, "B": B, "T": T, "model": args.model, "error": ("%s: %s" % (type(ex).__name__, ex))[:400],
                      "where": tb[-3][:200] if len(tb) >= 3 else ""})
            finally:
                try:
                    torch._dynamo.reset()
                except Exception:
                    pass
                gc.collect()
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
