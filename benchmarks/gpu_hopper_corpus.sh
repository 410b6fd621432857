#!/usr/bin/env bash
# Issue 38: the Hopper corpus's correct kernels on an H100/H200 (sm_90a builds): tests/hopper_corpus/mma_tma.cu's
# fixed TMA-fed mma.sync GEMM (checked on ragged sizes, and 10 repeats bit for bit), its elect_one launcher, and
# task 5.12's graded correctness cases with the solution (cc_hopper.h's GPU branch). Usage: bash
# benchmarks/gpu_hopper_corpus.sh OUT_DIR (run from the repository root).
set -u
OUT=${1:-/tmp/hopper_corpus}
mkdir -p "$OUT"
export PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0a
# the kernel beside lesson 05's headers, staged as tests/sim/test_hopper_corpus.py stages them (one copy in the repo)
STAGE=$(mktemp -d)
cp tests/hopper_corpus/mma_tma.cu solutions/05_tensor_cores/cc_hopper.h solutions/05_tensor_cores/cc_mma.h "$STAGE/"
export STAGE
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python - <<'PY' 2>&1 | tee "$OUT/corpus.txt"
import os
import torch
import cudacourse as cc
m = cc.load(os.path.join(os.environ["STAGE"], "mma_tma.cu"), ["mma_tma_fence", "mma_tma_nofence", "elect_count"], backend="cuda")
out = torch.zeros(1, dtype=torch.int32, device="cuda")
m.elect_count(out)
torch.cuda.synchronize()
print("elect_count:", int(out.item()), "(expected 4)")
for M, N, K in [(100, 130, 328), (257, 193, 1000), (1024, 1024, 4096)]:
    A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    W = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    ref = A.double() @ W.double().T
    for fn in ("mma_tma_fence", "mma_tma_nofence"):
        runs = []
        for _ in range(10):
            C = torch.full((M, N), float("nan"), device="cuda")
            getattr(m, fn)(A, W, C, M, N, K)
            torch.cuda.synchronize()
            runs.append(C.clone())
        err = float((runs[0].double() - ref).abs().max() / ref.abs().max())
        differ = sum(int(not torch.equal(r, runs[0])) for r in runs[1:])
        print(f"{fn} {M}x{N}x{K}: nan={bool(runs[0].isnan().any())} max rel err {err:.2e}, "
              f"{differ} of 9 repeats differ from the first")
PY
CUDA_COURSE_IMPL=solution timeout 100 python -m pytest tests/test_05_tensor_cores.py -q -n 0 -k "test_gemm_wgmma" -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/pytest_5_12.txt"
