#!/bin/sh
# gpu_check.sh GPU_CHECK [ENV...]: the GPU check (bench/gpu_check) runs to its end at small sizes
# and passes: on the stand-in driver when its three libraries are given as SN_LIB*=PATH
# arguments (then runtime/cuda runs every step: kernels vs the interpreter, training, timing, in
# f32, TF32, bf16 and fp16, and attention timed alone; none may be a SKIP but the PyTorch
# anchors', which say "skipped: no torch"), else on the CPU device (the CUDA-only steps are
# SKIPs). Checks the exit status, that every kernel kind was covered, the 16-bit steps, the
# report's table and that the JSON parses.
set -eu
check=$1
shift
dir=$(mktemp -d /tmp/sn_gpu_check_XXXXXX)
trap 'rm -rf "$dir"' EXIT
device=cpu
if [ $# -gt 0 ]; then
  for kv in "$@"; do export "${kv?}"; done
  device=cuda
fi
status=0
"$check" --device $device --small --tiny-steps 2 --train-steps 3 --time-steps 1 --seed 7 \
  --out "$dir" --cache-dir "$dir/cache" > "$dir/out.txt" 2>&1 || status=$?
cat "$dir/out.txt"
[ "$status" = 0 ] || { echo "FAIL: gpu_check exit status $status"; exit 1; }
grep -q "^PASS kernels: every kind covered" "$dir/out.txt" || { echo "FAIL: kinds"; exit 1; }
grep -q "^PASS train: tiny GPT-2 vs the interpreter" "$dir/out.txt" || { echo "FAIL: tiny"; exit 1; }
grep -q "^| kernels: gemm | PASS |" "$dir/gpu_check_report.md" || { echo "FAIL: report"; exit 1; }
for step in "kernels: pointwise bf16 and f16" "kernels: gemm bf16" "kernels: gemm f16" \
  "kernels: attention f16 D=64" "train: tiny B=2 T=32, 3 steps bf16 vs the CPU device" \
  "time: tiny B=2 T=32 bf16" "time: tiny B=2 T=32 fp16" "time: attention B=1 H=2 T=64 D=64 bf16"; do
  grep -q "^PASS $step" "$dir/out.txt" || { echo "FAIL: no PASS for $step"; exit 1; }
done
# the PyTorch anchors are SKIPs here (no --anchors: "skipped: no torch"), and only they
grep -q "^SKIP anchors: torch SDPA .*skipped: no torch" "$dir/out.txt" || { echo "FAIL: the anchors' SKIP"; exit 1; }
if [ $device = cuda ] && grep "^SKIP" "$dir/out.txt" | grep -qv "^SKIP anchors: "; then
  echo "FAIL: a SKIP on the stand-in"; exit 1
fi
# on an sm_90 stand-in the wgmma step runs (the runtime's compile, launch and comparison; the
# layouts themselves only a real H100 can confirm), and the wgmma attention kernels are timed as
# tools/gpu_next's wgmma item times them (the plumbing, not the speed)
if [ $device = cuda ]; then
  SN_STANDIN_SM=90 SN_STANDIN_PROFILE="$dir/sm90-profile.tsv" \
    "$check" --device cuda --small --only attention --seed 7 --out "$dir/sm90" \
    --att-tiles 'dkv=wgmma;fwd=wgmma,dkv=wgmma;dq=atomic' \
    --cache-dir "$dir/sm90/cache" > "$dir/sm90.txt" 2>&1 || { cat "$dir/sm90.txt"; echo "FAIL: sm_90 run"; exit 1; }
  grep -q "^PASS wgmma: .* 7 of 7 layouts" "$dir/sm90.txt" || { cat "$dir/sm90.txt"; echo "FAIL: wgmma step"; exit 1; }
  grep -q "^PASS time: attention .* tiles #2: fwd=wgmma,dkv=wgmma: forward .* dk/dv about" "$dir/sm90.txt" ||
    { cat "$dir/sm90.txt"; echo "FAIL: the wgmma kernels timed"; exit 1; }
  # the simulator's profile of every attention kernel of those runs (docs/sim.md): no verdict
  # (uncoalesced global accesses, data read again and again, bank conflicts)
  awk -F'\t' 'NR > 1 && $1 ~ /attention/ && $NF != "-" { print "FAIL: profile: " $1 ": " $NF; bad = 1 }
    END { exit bad }' "$dir/sm90-profile.tsv" || exit 1
  grep -q "attention_bwd_kv_dq" "$dir/sm90-profile.tsv" || { echo "FAIL: no atomic dq kernel profiled"; exit 1; }
  # the atomic dq in the wgmma dk/dv kernel, its outputs against the default kernels' (same inputs)
  grep -q "^PASS time: attention .* tiles #3: dq=atomic: .*atomic dq.*outputs against the default's (the same inputs): largest difference" "$dir/sm90.txt" ||
    { cat "$dir/sm90.txt"; echo "FAIL: the atomic dq timed and compared"; exit 1; }
fi
# a grouped-query shape (BxHxTxD/KV, as tools/gpu_next's llama item times smollm2's): on CUDA its
# backward is dq, dk and dv's parts and their sum (4 kernels), and with --only attention the
# SDPA anchor of the same shape and KV is found (another KV's is not)
if [ $device = cuda ]; then
  mkdir -p "$dir/gqa"
  printf '%s\n' '{"backend": "flash", "pass": "fwd+bwd", "B": 1, "H": 4, "Hkv": 2, "T": 64, "D": 64, "ms_median": 0.5}' \
    '{"backend": "cudnn", "pass": "fwd+bwd", "B": 1, "H": 4, "T": 64, "D": 64, "ms_median": 0.25}' > "$dir/gqa/torch_sdpa.jsonl"
  "$check" --device cuda --small --only attention --att-time 1x4x64x64/2 --anchors "$dir/gqa" \
    --out "$dir/gqa" --cache-dir "$dir/gqa/cache" > "$dir/gqa.txt" 2>&1 || { cat "$dir/gqa.txt"; echo "FAIL: gqa run"; exit 1; }
  grep -q "^PASS time: attention B=1 H=4 T=64 D=64 KV=2 bf16: .*forward + backward (dq, dk, dv; 4 kernels)" \
    "$dir/gqa.txt" || { cat "$dir/gqa.txt"; echo "FAIL: the grouped-query attention timed"; exit 1; }
  grep -q "^PASS anchors: torch SDPA B=1 H=4 T=64 D=64 KV=2 bf16: .*flash: fwd not measured, fwd+bwd 0.5 ms .*cudnn: fwd not measured, fwd+bwd not measured" \
    "$dir/gqa.txt" || { cat "$dir/gqa.txt"; echo "FAIL: the grouped-query anchor"; exit 1; }
fi
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['failures'] == 0 and len(d['steps']) > 10" \
  "$dir/gpu_check.json" || { echo "FAIL: gpu_check.json"; exit 1; }
echo "gpu_check.sh: the check ran to its end on the $device device"
