"""Issue 17 sweep: lesson 05's mma.sync GEMM (task 5.6/5.8) and bf16 bias+GELU (task 5.1/5.9) on the GPU.

One process builds, checks and times, in the same run:
  gemm 4096^3 (also 4096x4096x1024 and 4000^3 ragged): cuBLAS fp16 (torch.matmul, the reference), the
    solution's mma_gemm_pipelined, the variants of benchmarks/mma_sweep_gemm.cu (tile shape, k-tile, stages,
    register double buffering, L2 block swizzle), the lesson bench's "mma.sync ceiling (registers only)"
    and a second, fairer ceiling: ldmatrix + mma.sync out of shared memory with the GEMM's 64x64 warp
    tile, no global loads ("smem ceiling").
    The bench's second ceiling (lessons/05_tensor_cores/bench.py SMEM_CEILING_SRC: task 5.6's inner loop on
    random operands in shared memory) and diagnostics: the same on constant operands, and the solution on
    constant inputs (all 1.0), to tell data-dependent power from the kernel's own limits; then the SM clock
    and board power (nvidia-smi, sampled every 20 ms) while each of cuBLAS, the solution (random and constant
    inputs) and the two ceilings runs for about half a second.
  bias+GELU 16384x4096 bf16: the measured copy bandwidth, the solution's bias_gelu_bf16, and the variants of
    benchmarks/mma_sweep_gelu.cu (cache hints, two rows in flight, grid sizes (the argument: grid.y, 0 = sized
    to the GPU), a flat layout (the argument: groups per thread)).
Checks: fresh random inputs, output poisoned with NaN before the checked call, relative error
||out - ref|| / ||ref|| against torch (fp32 matmul of the same bf16 inputs; fp64 GELU); a row that fails its
check is marked FAIL and its time is not a result. Timing: cudacourse.bench.time_stats (CUDA events, L2
flushed before each run, median of up to 50).
Run on the GPU machine from the course's top folder: ``python3 benchmarks/mma_sweep.py OUT_FOLDER``; writes
sweep.md and sweep.json there and prints the table last.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import cudacourse as cc
from cudacourse import bench
from cudacourse.loader import import_file

ROOT = Path(__file__).resolve().parent.parent
SOL = ROOT / "solutions/05_tensor_cores"
T0 = time.monotonic()
GEMM_VARIANTS = ["g_128x128_k32_s4", "g_128x128_k32_s4_sw", "g_128x128_k32_s4_db", "g_128x128_k64_s3",
                 "g_128x128_k64_s3_db", "g_128x256_k32_s4", "g_128x256_k32_s4_db", "g_256x128_k32_s4_db",
                 "g_128x256_k64_s3_db", "g_192x256_k32_s4_db", "g_256x128_k64_s3_db"]
GELU_VARIANTS = [("gelu_plain", 0), ("gelu_hint", 0), ("gelu_plain2", 0), ("gelu_hint2", 0), ("gelu_hint", 264),
                 ("gelu_hint", 2112), ("gelu_hint", 4224), ("gelu_hint", 16384), ("gelu_plain", 16384),
                 ("gelu_hint2", 1056), ("gelu_flat", 1), ("gelu_flat", 2), ("gelu_flat", 4)]


def log(msg: str) -> None:
    """Print a line with the seconds since the start."""
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when out holds a NaN (an unwritten or broken element)."""
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm())


def timed(fn) -> tuple[float, float]:
    """(median ms, spread) with the course's timer: CUDA events, L2 flushed before each run."""
    return bench.time_stats(fn, warmup=5, reps=50)


def gemm_rows(gm, sol, M: int, N: int, K: int, variants: list[str],
              ceilings: list[tuple[str, object, float]]) -> list[dict]:
    """Rows of one GEMM size: cuBLAS fp16, the solution, each variant (checked), then the ceilings."""
    g = torch.Generator(device="cuda").manual_seed(M * 7 + K)
    Ah = torch.randn(M, K, device="cuda", generator=g).half()
    Wh = torch.randn(N, K, device="cuda", generator=g).half()
    Ab, Wb = Ah.bfloat16(), Wh.bfloat16()
    ref = Ab.float() @ Wb.float().T
    C, Ch = torch.empty(M, N, device="cuda"), torch.empty(M, N, device="cuda", dtype=torch.half)
    flops = 2 * M * N * K
    group = f"gemm {M}x{N}x{K}"
    ms, sp = timed(lambda: torch.matmul(Ah, Wh.T, out=Ch))
    rows = [dict(group=group, name="cuBLAS torch.matmul fp16 (reference)", ms=ms, spread=sp, tflops=flops / ms / 1e9,
                 err=None)]
    ref_ms = ms
    fns = [("solution mma_gemm_pipelined", sol.mma_gemm_pipelined)] + [(v, getattr(gm, v)) for v in variants]
    for name, fn in fns:
        C.fill_(float("nan"))
        fn(Ab, Wb, C, M, N, K)
        torch.cuda.synchronize()
        err = rel_err(C, ref)
        ms, sp = timed(lambda fn=fn: fn(Ab, Wb, C, M, N, K))
        rows.append(dict(group=group, name=name, ms=ms, spread=sp, tflops=flops / ms / 1e9, err=err,
                         vs_ref=ref_ms / ms, ok=err < 1e-3))
    for name, fn, cflops in ceilings:
        ms, sp = timed(fn)
        rows.append(dict(group=group, name=name, ms=ms, spread=sp, tflops=cflops / ms / 1e9, err=None))
    return rows


def sample_clocks(fn, seconds: float = 0.5) -> tuple[float, float]:
    """(median SM clock MHz, median board power W) from nvidia-smi while ``fn`` runs back to back."""
    import subprocess

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                          "-lms", "20"], stdout=subprocess.PIPE, text=True)
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    p.terminate()
    text = p.communicate(timeout=10)[0]
    vals = [tuple(float(v) for v in ln.split(",")) for ln in text.strip().splitlines() if ln.count(",") == 1]
    vals = vals[len(vals) // 4:]  # skip the ramp
    if not vals:
        return float("nan"), float("nan")
    clk, pw = sorted(v[0] for v in vals), sorted(v[1] for v in vals)
    return clk[len(clk) // 2], pw[len(pw) // 2]


def gelu_rows(vm, sol, copy_gbs: float) -> list[dict]:
    """bias+GELU 16384x4096: the solution and each variant against the copy bandwidth (checked)."""
    rows_, cols = 16384, 4096
    x = torch.randn(rows_, cols, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ref = F.gelu(x.double() + b.double())
    nbytes = 2 * x.numel() * 2
    group = f"bias+GELU {rows_}x{cols} bf16"
    out = []
    fns = [("solution bias_gelu_bf16", lambda: sol.bias_gelu_bf16(x, b, y, rows_, cols))]
    fns += [(f"{n}({a})", lambda n=n, a=a: getattr(vm, n)(x, b, y, rows_, cols, a)) for n, a in GELU_VARIANTS]
    for name, fn in fns:
        y.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = rel_err(y, ref)
        ms, sp = timed(fn)
        gbs = nbytes / ms / 1e6
        out.append(dict(group=group, name=name, ms=ms, spread=sp, gbs=gbs, pct_copy=100 * gbs / copy_gbs, err=err,
                        ok=err < 2.0**-8))
    return out


def main() -> None:
    """Build, check and time everything; write sweep.md / sweep.json under argv[1]."""
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    info = bench.machine_info()
    copy_gbs = bench.copy_bandwidth_gbs()
    log(f"{info['gpu']}: copy {copy_gbs:.0f} GB/s")
    header = str(SOL / "cc_mma.h")
    sol = cc.load(SOL / "gemm_tc.cu", ["mma_gemm_pipelined"], backend="cuda")
    solb = cc.load(SOL / "bf16.cu", ["bias_gelu_bf16"], backend="cuda")
    gm = cc.load((ROOT / "benchmarks/mma_sweep_gemm.cu").read_text().replace("@HEADER@", header),
                 GEMM_VARIANTS + ["smem_ceiling"], backend="cuda")
    vm = cc.load((ROOT / "benchmarks/mma_sweep_gelu.cu").read_text().replace("@BF16@", str(SOL / "bf16.cu")),
                 sorted({n for n, _ in GELU_VARIANTS}), backend="cuda")
    b5 = import_file(ROOT / "lessons/05_tensor_cores/bench.py", "mma17_bench05")
    ck = cc.load(b5.CEILING_SRC.replace("@HEADER@", header), ["mma_ceiling"], backend="cuda")
    log("built")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, iters = sms * 8, 4096
    cout = torch.empty(blocks * 128, device="cuda")
    reg_flops = blocks * 4 * iters * 8 * 2 * 16 * 8 * 16
    sblocks, siters = sms * 3 * 2, 2048
    sout = torch.empty(sblocks * 128, device="cuda")
    smem_flops = sblocks * 4 * siters * 64 * 2 * 16 * 8 * 16  # warps x iters x 64 mma.sync per iter
    ceilings = [("mma.sync ceiling (registers only)", lambda: ck.mma_ceiling(cout, blocks, iters), reg_flops),
                ("diag: smem ceiling of the sweep (k-tile 32, 3 blocks per SM, fixed operands)",
                 lambda: gm.smem_ceiling(sout, sblocks, siters), smem_flops)]
    skc = cc.load(b5.SMEM_CEILING_SRC.replace("@HEADER@", header), ["mma_smem_ceiling"], backend="cuda")
    kblocks, kiters = sms * 3 * 4, 1024  # as the bench's row
    rand_ops = torch.randn(2 * 128 * 32, device="cuda").bfloat16()
    const_ops = torch.full((2 * 128 * 32,), 0.01, device="cuda").bfloat16()
    kout = torch.empty(kblocks * 128, device="cuda")
    k_flops = kblocks * 4 * kiters * 2 * 32 * 2 * 16 * 8 * 16
    ceilings += [("mma.sync ceiling (ldmatrix from shared memory, random operands)",
                  lambda: skc.mma_smem_ceiling(rand_ops, kout, kblocks, kiters), k_flops),
                 ("diag: the same, constant operands (0.01)",
                  lambda: skc.mma_smem_ceiling(const_ops, kout, kblocks, kiters), k_flops)]
    rows = gemm_rows(gm, sol, 4096, 4096, 4096, GEMM_VARIANTS, ceilings)
    n = 4096
    ones = torch.ones(n, n, device="cuda", dtype=torch.bfloat16)
    cbuf = torch.empty(n, n, device="cuda")
    ms, sp = timed(lambda: sol.mma_gemm_pipelined(ones, ones, cbuf, n, n, n))
    ok = bool((cbuf == n).all())
    rows.append(dict(group=f"gemm {n}x{n}x{n}", name="diag: solution on constant inputs (all 1.0)", ms=ms, spread=sp,
                     tflops=2 * n**3 / ms / 1e9, err=None, ok=ok))
    log("gemm 4096^3 done")
    Ah, Wh = torch.randn(n, n, device="cuda").half(), torch.randn(n, n, device="cuda").half()
    Ab, Wb, Ch = Ah.bfloat16(), Wh.bfloat16(), torch.empty(n, n, device="cuda", dtype=torch.half)
    phases = [("cuBLAS fp16, random inputs", lambda: torch.matmul(Ah, Wh.T, out=Ch)),
              ("solution mma_gemm_pipelined, random inputs", lambda: sol.mma_gemm_pipelined(Ab, Wb, cbuf, n, n, n)),
              ("solution mma_gemm_pipelined, constant inputs",
               lambda: sol.mma_gemm_pipelined(ones, ones, cbuf, n, n, n)),
              ("mma.sync ceiling (registers only)", lambda: ck.mma_ceiling(cout, blocks, iters)),
              ("smem ceiling, random operands", lambda: skc.mma_smem_ceiling(rand_ops, kout, kblocks, kiters)),
              ("smem ceiling, constant operands", lambda: skc.mma_smem_ceiling(const_ops, kout, kblocks, kiters))]
    clocks = []
    for name, fn in phases:
        try:
            clk, pw = sample_clocks(fn)
        except Exception as e:  # noqa: BLE001 - a diagnostic must not cost the real rows
            log(f"clock sampling failed: {type(e).__name__}: {e}")
            break
        clocks.append(dict(phase=name, sm_mhz=clk, power_w=pw))
        log(f"clocks: {name}: {clk:.0f} MHz, {pw:.0f} W")
    best = sorted((r for r in rows[2:] if r.get("ok")), key=lambda r: r["ms"])[:4]
    others = [r["name"] for r in best if r["name"] in GEMM_VARIANTS]
    rows += gemm_rows(gm, sol, 4096, 4096, 1024, others, [])
    rows += gemm_rows(gm, sol, 4000, 4000, 4000, others, [])
    log("gemm other sizes done")
    rows += gelu_rows(vm, solb, copy_gbs)
    log("gelu done")
    lines = [f"# mma17 sweep: {info['gpu']}, torch {torch.__version__}, copy {copy_gbs:.0f} GB/s", "",
             "| group | version | ms | spread | TFLOP/s | vs cuBLAS | % copy | rel. err | check |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        tf = f"{r['tflops']:.1f}" if "tflops" in r else ""
        vs = f"{r['vs_ref']:.3f}x" if "vs_ref" in r else ""
        pc = f"{r['pct_copy']:.1f}" if "pct_copy" in r else ""
        er = "" if r["err"] is None else f"{r['err']:.2e}"
        ok = "" if "ok" not in r else ("ok" if r["ok"] else "FAIL")
        lines.append(f"| {r['group']} | {r['name']} | {r['ms']:.4f} | {r['spread']:.3f} | {tf} | {vs} | {pc} | {er} "
                     f"| {ok} |")
    lines += ["", "| while running (about 0.5 s each) | median SM clock MHz | median board power W |",
              "|---|---:|---:|"]
    lines += [f"| {c['phase']} | {c['sm_mhz']:.0f} | {c['power_w']:.0f} |" for c in clocks]
    md = "\n".join(lines) + "\n"
    (out_dir / "sweep.md").write_text(md)
    (out_dir / "sweep.json").write_text(json.dumps({"machine": info, "copy_gbs": copy_gbs, "rows": rows,
                                                    "clocks": clocks}, indent=1,
                                                   default=str))
    print(md, flush=True)


if __name__ == "__main__":
    main()
