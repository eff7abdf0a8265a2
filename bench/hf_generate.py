"""hf_generate.py: the side-by-side of bench/generate_bench (docs/generate.md): Hugging Face
transformers' GPT-2 124M (random weights from GPT2Config(), no download) generating greedily with
generate(use_cache=True), batch 1, fp32, on the CPU with the same number of threads, the same
prompt length and new tokens; then, when --sinter names generate_bench, sinter's run of the same
sizes on its CPU device, and the ratio. Not part of sinter's build; needs python3 with torch and
transformers.

  python3 bench/hf_generate.py --threads 2 --prompt-len 32 --new 256 --sinter build/bench/generate_bench
"""
import argparse
import json
import subprocess
import time


def hf_tokens_per_s(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(GPT2Config()).eval()  # gpt2 124M: 12 layers, 12 heads, 768, ctx 1024
    g = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, 50257, (1, args.prompt_len), generator=g)
    kw = dict(do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None)
    with torch.inference_mode():
        model.generate(prompt, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
        best = None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=args.new, min_new_tokens=args.new, **kw)
            s = time.perf_counter() - t0
            assert out.shape[1] == args.prompt_len + args.new
            best = s if best is None else min(best, s)
    return args.new / best, torch.__version__


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sinter", help="path of generate_bench: run it too and print the ratio")
    args = p.parse_args()
    hf, version = hf_tokens_per_s(args)
    import transformers
    print(json.dumps({"bench": "hf_generate", "torch": version, "transformers": transformers.__version__,
                      "threads": args.threads, "prompt": args.prompt_len, "new": args.new,
                      "tokens_per_s": round(hf, 3)}), flush=True)
    if args.sinter:
        cmd = [args.sinter, "--model", "gpt2", "--device", "cpu", "--threads", str(args.threads),
               "--prompt-len", str(args.prompt_len), "--new", str(args.new), "--baseline-tokens", "0",
               "--positions", "64"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        ours = next(json.loads(l) for l in out.splitlines() if l.startswith('{"bench":"generate"'))
        print(json.dumps({"bench": "sinter_generate", "tokens_per_s": ours["tokens_per_s"],
                          "decode_tokens_per_s": ours["decode_tokens_per_s"]}))
        print(f"gpt2 124M, batch 1, fp32, {args.prompt_len}-token prompt, {args.new} new tokens, "
              f"{args.threads} threads: sinter {ours['tokens_per_s']:.2f} tokens/s, transformers "
              f"{hf:.2f} tokens/s: {ours['tokens_per_s'] / hf:.2f}x")


if __name__ == "__main__":
    main()
