#!/usr/bin/env python3
"""torch_sdpa.py: the attention anchor of the GPU check (tools/gpu_check, docs/gpu.md): PyTorch's
scaled_dot_product_attention, causal, bf16, (B, H, T, D) at the shapes sinter's "time: attention"
step uses, for each backend asked (flash: FlashAttention-2; cudnn; efficient: memory-efficient;
math), timed per call. Not part of sinter's build; needs only python3 with torch.

  fwd:     o = sdpa(q, k, v, is_causal=True) with q, k, v requiring gradients (so the forward
           also keeps the softmax statistics, the lse, as sinter's forward does)
  fwd+bwd: the same, then torch.autograd.grad(o, (q, k, v), do): dq, dk, dv

A shape BxHxTxD/KV gives k and v KV heads (grouped-query attention, as LLaMA's; KV divides H):
SDPA's enable_gqa (torch 2.5 and later; "gqa": "enable_gqa"), else k and v repeated to H heads
before the call ("gqa": "repeated", the copies outside the timing).

--warmup untimed calls, then --reps calls each between two CUDA events; prints one JSON object
a line, {"backend": "flash", "pass": "fwd", "B": 16, "H": 12, "Hkv": 12, "T": 1024, "D": 64,
"ms_median": .., "ms_min": .., "ms_max": .., "tflops": ..}, or {"backend": .., "pass": ..,
.., "error": ".."} for one that fails (a backend this GPU or build lacks), and goes on.
tflops counts the causal half of the products: fwd 2 matmuls, fwd+bwd 7 (2 + 5), each
2 B H T T D / 2.

  python3 bench/torch_sdpa.py [--backends flash,cudnn,efficient] [--shapes 16x12x1024x64,8x9x1024x64/3]
                              [--reps 50] [--warmup 10] [--device cuda]
"""
import argparse
import json
import sys
import traceback


def emit(obj):
    print(json.dumps(obj), flush=True)


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        dims, _, kv = item.lower().partition("/")
        b, h, t, d = (int(v) for v in dims.split("x"))
        kv = int(kv) if kv else h
        if kv < 1 or h % kv:
            raise ValueError("KV must divide H")
        shapes.append((b, h, t, d, kv))
    return shapes


def run_one(torch, args, backend, which, B, H, T, D, KV):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    names = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
             "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
    if backend not in names:
        raise ValueError("unknown backend %r (flash, cudnn, efficient, math)" % backend)
    kind = getattr(SDPBackend, names[backend], None)
    if kind is None:
        raise RuntimeError("this torch has no SDPBackend.%s" % names[backend])
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    gen = torch.Generator(device=dev).manual_seed(7)
    q, k, v, do = (torch.randn(B, KV if i in (1, 2) else H, T, D, device=dev, dtype=torch.bfloat16,
                               generator=gen) for i in range(4))
    gqa = {} if KV == H else {"enable_gqa": True}
    how = "" if KV == H else "enable_gqa"
    if gqa:
        try:  # torch before 2.5 has no enable_gqa: k and v repeated to H heads, outside the timing
            F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], **gqa)
        except TypeError:
            k, v = (x.repeat_interleave(H // KV, dim=1) for x in (k, v))
            gqa, how = {}, "repeated"
    for t in (q, k, v):
        t.requires_grad_(True)

    def call():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        if which == "fwd+bwd":
            torch.autograd.grad(o, (q, k, v), do)
        return o

    ms = []
    with sdpa_kernel([kind]):
        for _ in range(args.warmup):
            call()
        if cuda:
            torch.cuda.synchronize()
        for _ in range(args.reps):
            if cuda:
                ev = [torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)]
                ev[0].record()
                call()
                ev[1].record()
                ev[1].synchronize()
                ms.append(ev[0].elapsed_time(ev[1]))
            else:
                import time
                t0 = time.perf_counter()
                call()
                ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    med = ms[len(ms) // 2]
    flops = (2 if which == "fwd" else 7) * 2.0 * B * H * T * T * D / 2
    return {"backend": backend, "pass": which, "B": B, "H": H, "Hkv": KV, "gqa": how, "T": T, "D": D,
            "reps": len(ms),
            "ms_median": round(med, 5), "ms_min": round(ms[0], 5), "ms_max": round(ms[-1], 5),
            "tflops": round(flops / (med / 1e3) / 1e12, 2),
            "device": torch.cuda.get_device_name(dev) if cuda else "cpu", "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="flash,cudnn,efficient")
    ap.add_argument("--shapes", default="16x12x1024x64,4x12x256x64", help="BxHxTxD,...")
    ap.add_argument("--passes", default="fwd,fwd+bwd")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError:
        ap.error("--shapes is BxHxTxD[/KV][,BxHxTxD[/KV]...] (KV dividing H)")
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps at least 1, --warmup at least 0")
    try:
        import torch
    except Exception as ex:  # the caller says "skipped: no torch"
        emit({"error": "no torch: %s" % ex})
        return 3
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        emit({"error": "no torch: torch %s sees no CUDA device" % torch.__version__})
        return 3
    failed = 0
    for B, H, T, D, KV in shapes:
        for backend in [b for b in args.backends.split(",") if b]:
            for which in [p for p in args.passes.split(",") if p]:
                try:
                    if which not in ("fwd", "fwd+bwd"):
                        raise ValueError("unknown pass %r (fwd, fwd+bwd)" % which)
                    emit(run_one(torch, args, backend, which, B, H, T, D, KV))
                except Exception as ex:
                    failed += 1
                    tb = traceback.format_exc().strip().splitlines()
                    emit({"backend": backend, "pass": which, "B": B, "H": H, "Hkv": KV, "T": T, "D": D,
                          "error": ("%s: %s" % (type(ex).__name__, ex))[:400],
                          "where": tb[-3][:200] if len(tb) >= 3 else ""})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
