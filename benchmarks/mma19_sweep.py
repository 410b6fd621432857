"""Issue 17, branch mma19: mma.sync fed by TMA (second round) and gemm_wgmma at ragged sizes (H100).

One process builds, checks and times, in the same run (sm_90a: TORCH_CUDA_ARCH_LIST=9.0a):
  mma  benchmarks/mma19_tma.cu's variants (mma18's kernel re-measured as it is now, a grouped tile order,
       fragment prefetch across k-tiles, two 128 x 128 blocks per SM) against cuBLAS fp16, task 5.6, gemm_wgmma,
       the two mma.sync ceiling rows of lessons/05_tensor_cores/bench.py and the ldmatrix ceiling at 1, 2 and 3
       blocks of 4 warps per SM; then the SM clock and board power (nvidia-smi) while some of them run.
  wg   gemm_wgmma (task 5.12) and copies of it with those WG_VARIANTS that apply to the solution as it is (tile
       origins kept inside M x N; the last k-tile's box kept inside K; both; once the solution shifts its tiles,
       the copy without the shift), at 4096^3, 4000^3, 4000x4000x4096, 4096x4096x4000 and
       4096x4096x1024, each next to cuBLAS fp16.
Checks: fresh random inputs, C poisoned with NaN, relative Frobenius error against a float32 matmul of the
same bf16 inputs, on small ragged shapes and on each timed shape (a failed check marks the row FAIL: its time is
not a result); the gemm_wgmma copies must also give C bit for bit equal to the solution's. Timing:
cudacourse.bench.time_stats (CUDA events, L2 flushed before each run, median of 50).

    PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0a python3 benchmarks/mma19_sweep.py OUT_FOLDER [--parts mma,wg]
        [--variants mma_tma_256x128,...] [--repeat 30]
Writes OUT_FOLDER/mma19_<parts>.md (and .json), rewritten after each part, and prints the table last.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import cudacourse as cc
from cudacourse import bench
from cudacourse.loader import import_file

ROOT = Path(__file__).resolve().parent.parent
SOL = ROOT / "solutions/05_tensor_cores"
T0 = time.monotonic()
MMA_VARIANTS = ["mma_tma_128x256", "mma_tma_256x128", "mma_tma_256x128_g8", "mma_tma_256x128_pf",
                "mma_tma_128x128_x2", "mma_tma_128x128_x2_pf"]  # the default of --variants (the first call)
ALL_MMA = MMA_VARIANTS + ["mma_tma_128x256_late", "mma_tma_256x128_late", "mma_tma_256x128_fence"]
CHECKS = [(37, 45, 72), (131, 129, 136), (300, 257, 520), (1000, 1004, 1032), (129, 255, 8), (257, 999, 200),
          (700, 600, 264)]
Row = dict

# gemm_wgmma copies. CLAMP: a block tile whose rows or columns would cross M or N starts M - 128 (N - 256) instead,
# so no A or W box and no C box reaches outside the matrix; the rows and columns it shares with its neighbour
# are computed in the same order and written twice with the same values. KTAIL: where K % 64 != 0 the last
# k-tile's box starts at K - 64 (inside the matrix) and each consumer warpgroup zeroes, in its own A rows, the
# columns that repeat the k-tile before (16-byte chunks, 128-byte swizzle), then fences them for wgmma.
_ORIGIN = "const int row0 = (tile / tiles_n) * kHBM, col0 = (tile % tiles_n) * kHBN;"
_CLAMPED = ("int row0 = (tile / tiles_n) * kHBM, col0 = (tile % tiles_n) * kHBN;\n"
            "            if (row0 + kHBM > M && M >= kHBM) row0 = M - kHBM;  // every box inside the matrix\n"
            "            if (col0 + kHBN > N && N >= kHBN) col0 = N - kHBN;")
CLAMP = [(_ORIGIN, _CLAMPED)]
KTAIL = [
    ("tma_load_2d(a_s + s * kHTileA, &map_a, t * kHBK, row0, &full[s]);\n"
     "                tma_load_2d(w_s + s * kHTileB, &map_w, t * kHBK, col0, &full[s]);",
     "const int k0 = (t == k_tiles - 1 && K % kHBK != 0 && K > kHBK) ? K - kHBK : t * kHBK;\n"
     "                tma_load_2d(a_s + s * kHTileA, &map_a, k0, row0, &full[s]);\n"
     "                tma_load_2d(w_s + s * kHTileB, &map_w, k0, col0, &full[s]);"),
    ("                const __nv_bfloat16* ws = w_s + s * kHTileB;\n                wgmma_fence();",
     "                const __nv_bfloat16* ws = w_s + s * kHTileB;\n"
     "                if (t == k_tiles - 1 && K % kHBK != 0 && K > kHBK) {\n"
     "                    const int rep = (kHBK - K % kHBK) / 8;  // repeated 16-byte chunks at the row start\n"
     "                    unsigned char* rows = reinterpret_cast<unsigned char*>(const_cast<__nv_bfloat16*>(as));\n"
     "                    for (int e = threadIdx.x % 128; e < 64 * rep; e += 128) {\n"
     "                        const int r = e / rep, q = e % rep;\n"
     "                        *reinterpret_cast<uint4*>(rows + r * 128 + ((q ^ (r % 8)) << 4)) =\n"
     "                            make_uint4(0, 0, 0, 0);\n"
     "                    }\n"
     "                    fence_async_smem();\n"
     "                    warpgroup_sync(wg);\n"
     "                }\n"
     "                wgmma_fence();"),
]
# The solution before this branch (its tile origins never shifted): the same-run baseline once CLAMP is in it.
_SHIFTED = ("const int row0 = tile_row0(tile, tiles_n, M), col0 = tile_col0(tile, tiles_n, N);",
            "const int row0 = (tile / tiles_n) * kHBM, col0 = (tile % tiles_n) * kHBN;")
WG_VARIANTS = {"wgmma_clamp": CLAMP, "wgmma_ktail": KTAIL, "wgmma_clamp_ktail": CLAMP + KTAIL,
               "wgmma_unshifted (the solution before mma19)": [_SHIFTED]}


def log(msg: str) -> None:
    """Print a line with the seconds since the start."""
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when out holds a NaN (an unwritten element)."""
    if not torch.isfinite(out).all():
        return float("inf")
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


class Shape:
    """Random operands of one GEMM shape: bf16 A (M x K), W (N x K), their fp16 copies, fp32 C and reference."""

    def __init__(self, M: int, N: int, K: int) -> None:
        self.M, self.N, self.K = M, N, K
        g = torch.Generator(device="cuda").manual_seed(M * 31 + N * 7 + K + int(time.time()))
        self.A = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        self.W = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        self.Ah, self.Wh = self.A.half(), self.W.half()
        self.C = torch.empty(M, N, device="cuda")
        self.Ch = torch.empty(M, N, device="cuda", dtype=torch.half)
        self.ref = self.A.float() @ self.W.float().T
        self.flops = 2 * M * N * K
        self.name = f"{M}x{N}x{K}"


def cublas_row(group: str, s: Shape) -> Row:
    """cuBLAS fp16 (torch.matmul writing fp16, as the lesson bench) on the shape's operands."""
    ms, sp = bench.time_stats(lambda: torch.matmul(s.Ah, s.Wh.T, out=s.Ch))
    return dict(group=group, name="cuBLAS torch.matmul fp16 (reference)", ms=ms, spread=sp,
                tflops=s.flops / ms / 1e9, err=None)


def gemm_row(group: str, name: str, s: Shape, fn: Callable[[], object], ref_ms: float,
             same_as: torch.Tensor | None = None) -> Row:
    """Check ``fn`` (writes s.C) on NaN-poisoned C (and, given ``same_as``, bit equality with it), then time it."""
    s.C.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    err = rel_err(s.C, s.ref)
    ok = err < 1e-3 and (same_as is None or bool(torch.equal(s.C, same_as)))
    ms, sp = bench.time_stats(fn)
    return dict(group=group, name=name, ms=ms, spread=sp, tflops=s.flops / ms / 1e9, err=err, vs_ref=ref_ms / ms,
                ok=ok)


def small_checks(fn: Callable, name: str, ref_fn: Callable | None = None) -> float:
    """Worst relative error of fn(A, W, C, M, N, K) over CHECKS; inf when any output is left unwritten or (given
    ``ref_fn``) differs in any bit from ref_fn's C."""
    worst = 0.0
    for M, N, K in CHECKS:
        s = Shape(M, N, K)
        s.C.fill_(float("nan"))
        fn(s.A, s.W, s.C, M, N, K)
        torch.cuda.synchronize()
        e = rel_err(s.C, s.ref)
        if ref_fn is not None:
            c2 = torch.full_like(s.C, float("nan"))
            ref_fn(s.A, s.W, c2, M, N, K)
            torch.cuda.synchronize()
            if not torch.equal(s.C, c2):
                e = float("inf")
        log(f"  check {name} {M}x{N}x{K}: {e:.2e}")
        worst = max(worst, e)
    return worst


def sample_clocks(fn: Callable[[], object], seconds: float = 0.6) -> tuple[float, float]:
    """(median SM clock MHz, median board power W) from nvidia-smi while ``fn`` runs back to back."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                          "-lms", "20"], stdout=subprocess.PIPE, text=True)
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    p.terminate()
    text = p.communicate(timeout=10)[0]
    vals = [tuple(float(v) for v in ln.split(",")) for ln in text.strip().splitlines() if ln.count(",") == 1]
    vals = vals[len(vals) // 3:]  # skip the ramp
    if not vals:
        return float("nan"), float("nan")
    clk, pw = sorted(v[0] for v in vals), sorted(v[1] for v in vals)
    return clk[len(clk) // 2], pw[len(pw) // 2]


def table(rows: list[Row], title: str) -> str:
    """The rows as a markdown table."""
    lines = [f"## {title}", "", "| group | version | ms | spread | TFLOP/s | vs cuBLAS | rel. err | check |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "sm_mhz" in r:
            lines.append(f"| clocks | {r['name']} | | | | | {r['sm_mhz']:.0f} MHz | {r['power_w']:.0f} W |")
            continue
        vs = f"{r['vs_ref']:.3f}x" if "vs_ref" in r else ""
        er = "" if r.get("err") is None else f"{r['err']:.2e}"
        ok = "" if "ok" not in r else ("ok" if r["ok"] else "FAIL")
        lines.append(f"| {r['group']} | {r['name']} | {r['ms']:.4f} | {r['spread']:.3f} | {r['tflops']:.1f} | {vs} "
                     f"| {er} | {ok} |")
    return "\n".join(lines) + "\n"


def write(out_dir: Path, stem: str, info: dict, parts: list[tuple[str, list[Row]]], notes: list[str]) -> str:
    """Write STEM.md / STEM.json with what has been measured so far; return the markdown."""
    md = f"# mma19 sweep: {info['gpu']}, torch {torch.__version__}, CUDA {torch.version.cuda}\n\n"
    md += "\n".join(table(rows, title) for title, rows in parts)
    if notes:
        md += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    (out_dir / f"{stem}.md").write_text(md)
    (out_dir / f"{stem}.json").write_text(json.dumps({"machine": info, "parts": parts, "notes": notes},
                                                         indent=1, default=str))
    return md


def repeat_test(tm, names: list[str], runs: int, notes: list[str]) -> None:
    """Run each variant ``runs`` times at 4096^3 on one set of inputs, C poisoned with NaN each time; the kernel
    is deterministic, so a run whose C differs in any bit from the first run's shows a race."""
    s = Shape(4096, 4096, 4096)
    for n in names:
        f = getattr(tm, n)
        first, differ, worst = None, 0, 0.0
        for _ in range(runs):
            s.C.fill_(float("nan"))
            f(s.A, s.W, s.C, 4096, 4096, 4096)
            torch.cuda.synchronize()
            worst = max(worst, rel_err(s.C, s.ref))
            if first is None:
                first = s.C.clone()
            elif not torch.equal(s.C, first):
                differ += 1
        notes.append(f"repeat test {n}: {runs} runs at 4096^3 on the same inputs, {differ} with C not bit-equal to "
                     f"the first run's, worst relative error {worst:.2e}")
        log(notes[-1])
    del s


def part_mma(rows: list[Row], notes: list[str], variants: list[str], repeat: int) -> None:
    """mma.sync fed by TMA: variants against cuBLAS, task 5.6, gemm_wgmma and the ceilings; clocks last."""
    src = (ROOT / "benchmarks/mma19_tma.cu").read_text()
    src = src.replace("@MMA@", str(SOL / "cc_mma.h")).replace("@HOPPER@", str(SOL / "cc_hopper.h"))
    tm = cc.load(src, ALL_MMA + ["mma_smem_ceiling_occ"], backend="cuda")
    hop = cc.load(SOL / "gemm_hopper.cu", ["gemm_wgmma"], backend="cuda")
    sol = cc.load(SOL / "gemm_tc.cu", ["mma_gemm_pipelined"], backend="cuda")
    b5 = import_file(ROOT / "lessons/05_tensor_cores/bench.py", "mma19_bench05")
    header = str(SOL / "cc_mma.h")
    ck = cc.load(b5.CEILING_SRC.replace("@HEADER@", header), ["mma_ceiling"], backend="cuda")
    skc = cc.load(b5.SMEM_CEILING_SRC.replace("@HEADER@", header), ["mma_smem_ceiling"], backend="cuda")
    log("mma part built")
    if repeat:
        repeat_test(tm, variants, repeat, notes)
    worst = {v: small_checks(getattr(tm, v), v) for v in variants}
    notes.append("mma: worst relative error of the small ragged checks " + str(CHECKS) + ": "
                 + ", ".join(f"{v} {e:.2e}" for v, e in worst.items()))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    clock_fns: list[tuple[str, Callable[[], object]]] = []
    for M, N, K in [(4096, 4096, 4096), (4096, 4096, 1024), (4000, 4000, 4000)]:
        s = Shape(M, N, K)
        group = f"gemm {s.name}"
        cub = cublas_row(group, s)
        rows.append(cub)
        rows.append(gemm_row(group, "task 5.6 mma_gemm_pipelined (cp.async)", s,
                             lambda s=s: sol.mma_gemm_pipelined(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
        for v in variants:
            f = getattr(tm, v)
            r = gemm_row(group, v, s, lambda s=s, f=f: f(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"])
            r["ok"] = r["ok"] and worst[v] < 1e-3
            rows.append(r)
            if M == K == 4096:
                clock_fns.append((f"{v} 4096^3", lambda s=s, f=f: f(s.A, s.W, s.C, s.M, s.N, s.K)))
        rows.append(gemm_row(group, "task 5.12 gemm_wgmma", s,
                             lambda s=s: hop.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
        if M == K == 4096:
            clock_fns.insert(0, ("cuBLAS fp16 4096^3", lambda s=s: torch.matmul(s.Ah, s.Wh.T, out=s.Ch)))
            blocks, iters = sms * 8, 4096  # as lessons/05_tensor_cores/bench.py
            cout = torch.empty(blocks * 128, device="cuda")
            flops = blocks * 4 * iters * 8 * 2 * 16 * 8 * 16
            ms, sp = bench.time_stats(lambda c=cout, b=blocks, i=iters: ck.mma_ceiling(c, b, i))
            rows.append(dict(group=group, name="mma.sync ceiling (registers only)", ms=ms, spread=sp,
                             tflops=flops / ms / 1e9, err=None))
            ops = torch.randn(2 * 128 * 32, device="cuda").bfloat16()
            kiters = 1024
            for bps in (3, 2, 1):
                kblocks = sms * bps * 4  # 4 waves
                kout = torch.empty(kblocks * 128, device="cuda")
                kflops = kblocks * 4 * kiters * 2 * 32 * 2 * 16 * 8 * 16
                if bps == 3:
                    fn = (lambda o=ops, c=kout, b=kblocks, i=kiters: skc.mma_smem_ceiling(o, c, b, i))
                    name = ("mma.sync ceiling (ldmatrix from shared memory, random operands; bench.py's: "
                            "12 warps/SM)")
                    ms, sp = bench.time_stats(fn)
                    rows.append(dict(group=group, name=name, ms=ms, spread=sp, tflops=kflops / ms / 1e9, err=None))
                    clock_fns.append(("ldmatrix ceiling, 12 warps/SM", fn))
                fn = (lambda o=ops, c=kout, b=kblocks, p=bps, i=kiters: tm.mma_smem_ceiling_occ(o, c, b, i, p))
                ms, sp = bench.time_stats(fn)
                rows.append(dict(group=group, name=f"the same kernel held to {bps} block(s) = {4 * bps} warps "
                                 "per SM", ms=ms, spread=sp, tflops=kflops / ms / 1e9, err=None))
                if bps == 2:
                    clock_fns.append(("ldmatrix ceiling, 8 warps/SM", fn))
        rows.append(dict(cublas_row(group, s), name="cuBLAS torch.matmul fp16, timed again after the kernels"))
        log(f"{group} done")
        if M == K == 4096:
            for name, fn in clock_fns:
                try:
                    clk, pw = sample_clocks(fn)
                except Exception as e:  # noqa: BLE001 - nvidia-smi missing: no clock rows, the timings stand
                    notes.append(f"clock sampling failed: {type(e).__name__}: {e}")
                    break
                rows.append(dict(group="clocks", name=name, sm_mhz=clk, power_w=pw))
                log(f"clocks: {name}: {clk:.0f} MHz, {pw:.0f} W")
        del s


def part_wg(rows: list[Row], notes: list[str]) -> None:
    """gemm_wgmma and its WG_VARIANTS copies at ragged and whole sizes, next to cuBLAS."""
    ws = import_file(ROOT / "benchmarks/wgmma_sweep.py", "mma19_wgmma_sweep")
    hop = cc.load(SOL / "gemm_hopper.cu", ["gemm_wgmma"], backend="cuda")
    text = (SOL / "gemm_hopper.cu").read_text()
    chosen = {n: subs for n, subs in WG_VARIANTS.items() if all(old in text for old, _ in subs)}
    notes.append("wg: copies of the solution built here: " + ", ".join(chosen))
    with tempfile.TemporaryDirectory() as tmp:
        mods = {name: ws.build(name.split()[0], subs, Path(tmp)) for name, subs in chosen.items()}
        log("wg part built")
        worst = {n: small_checks(m.gemm_wgmma, n, hop.gemm_wgmma) for n, m in mods.items()}
        notes.append("wg: worst relative error of the small ragged checks (inf: C differs in a bit from the "
                     "solution's): " + ", ".join(f"{n} {e:.2e}" for n, e in worst.items()))
        for M, N, K in [(4096, 4096, 4096), (4000, 4000, 4000), (4000, 4000, 4096), (4096, 4096, 4000),
                        (4096, 4096, 1024)]:
            s = Shape(M, N, K)
            group = f"gemm {s.name}"
            cub = cublas_row(group, s)
            rows.append(cub)
            rows.append(gemm_row(group, "solution gemm_wgmma", s,
                                 lambda s=s: hop.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
            base = s.C.clone()
            for n, m in mods.items():
                r = gemm_row(group, n, s, lambda s=s, m=m: m.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"],
                             same_as=base)
                r["ok"] = r["ok"] and worst[n] < 1e-3
                rows.append(r)
            rows.append(gemm_row(group, "solution gemm_wgmma, timed again", s,
                                 lambda s=s: hop.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
            log(f"{group} done")
            del s


TITLES = {"wg": "gemm_wgmma (task 5.12) and copies that keep TMA boxes inside the matrix",
          "mma": "mma.sync fed by TMA against task 5.6, gemm_wgmma, cuBLAS fp16 and the ceilings"}


def main() -> None:
    """Build, check and time the chosen parts; write the tables under OUT_FOLDER."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--parts", default="wg,mma", help="comma-separated parts, in order (default wg,mma)")
    ap.add_argument("--variants", default=",".join(MMA_VARIANTS), help="mma part: comma-separated versions of "
                    f"benchmarks/mma19_tma.cu, among {ALL_MMA}")
    ap.add_argument("--repeat", type=int, default=0, help="mma part: run each version this many times at 4096^3 "
                    "on the same inputs and count outputs that differ from the first (0: skip)")
    args = ap.parse_args()
    chosen = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not chosen or any(p not in TITLES for p in chosen):
        raise SystemExit(f"--parts takes a comma-separated list of {sorted(TITLES)}, got {args.parts!r}")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in ALL_MMA for v in variants):
        raise SystemExit(f"--variants takes a comma-separated list of {ALL_MMA}, got {args.variants!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    info = bench.machine_info()
    log(f"{info['gpu']}, torch {torch.__version__}, parts {chosen}")
    hop = cc.load(SOL / "gemm_hopper.cu", ["gemm_wgmma_supported"], backend="cuda")
    ok = torch.zeros(1, dtype=torch.int32, device="cuda")
    hop.gemm_wgmma_supported(ok)
    if int(ok.item()) != 1:
        raise SystemExit("no sm_90a code in this build: run with TORCH_CUDA_ARCH_LIST=9.0a on a Hopper GPU")
    parts: list[tuple[str, list[Row]]] = []
    notes: list[str] = []
    stem = "mma19_" + "_".join(chosen)
    for p in chosen:
        rows: list[Row] = []
        parts.append((TITLES[p], rows))
        try:
            if p == "mma":
                part_mma(rows, notes, variants, args.repeat)
            else:
                part_wg(rows, notes)
        except Exception as e:  # noqa: BLE001 - keep what was measured; a trap ends the CUDA context
            notes.append(f"part {p} stopped: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            log(notes[-1])
            write(args.out, stem, info, parts, notes)
            raise
        write(args.out, stem, info, parts, notes)
    print(write(args.out, stem, info, parts, notes), flush=True)


if __name__ == "__main__":
    main()
