"""Issue 17, branch mma18: mma.sync fed by TMA, and why gemm_wgmma loses ground at the ragged 4000^3 (H100).

One process builds, checks and times, in the same run (sm_90a: TORCH_CUDA_ARCH_LIST=9.0a):
  1. gemm_wgmma's ragged-size diagnosis (its own kernel, launched by benchmarks/mma18_tma.cu's wgmma_ld with a
     chosen row stride `ld` of A and W and a chosen TMA L2 promotion), each next to cuBLAS fp16 on the same
     shape: 4096^3; 4000^3 as the solution launches it (ld 4000: rows 8000 bytes apart, not 128-byte
     aligned); 4000^3 with A and W inside 4000 x 4096 buffers (ld 4096: the same ragged tiles, aligned rows);
     4000^3 with L2 promotion none / 128B; 4000x4000x4096 (ragged M, N only); 4096x4096x4000 (ragged K and
     unaligned rows only); 4032^3 (ragged M, N, rows 8064 = 63 x 128 bytes apart: aligned); and the solution's
     gemm_wgmma at 4000^3 (must match the ld 4000 row).
  3. (a candidate fix of 1) gemm_wgmma with 64-byte TMA boxes and the 64-byte swizzle (WGMMA64_SUBS), checked
     and timed at 4096^3, 4000^3 and 4096x4096x1024 next to the solution.
  2. mma.sync fed by TMA (benchmarks/mma18_tma.cu: mma_tma_128x256, _128x256_1buf, _256x128) against cuBLAS
     fp16, task 5.6's mma_gemm_pipelined (cp.async), gemm_wgmma and both mma.sync ceiling rows of
     lessons/05_tensor_cores/bench.py, at 4096^3, 4096x4096x1024 and 4000^3.
Checks: fresh random inputs, C poisoned with NaN, relative Frobenius error against a float32 matmul of the
same bf16 inputs, on ragged small shapes and on each timed shape; a failed check marks the row FAIL (its time
is not a result). Timing: cudacourse.bench.time_stats (CUDA events, L2 flushed before each run, median of 50).
--parts picks and orders the parts (default 1,3,2); run the risky ones in a process of their own (a kernel that
traps ends its CUDA context): builds are cached, so a second process only runs.

    PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0a python3 benchmarks/mma18_sweep.py OUT_FOLDER [--parts 1,3]
Writes OUT_FOLDER/mma18_sweep_<parts>.md (and .json), rewritten after each part, and prints the table last.
"""

from __future__ import annotations

import json
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
TMA_VARIANTS = ["mma_tma_128x256", "mma_tma_128x256_1buf", "mma_tma_256x128"]
CHECKS = [(37, 45, 72), (131, 129, 136), (300, 257, 520), (1000, 1004, 1032), (129, 255, 8), (257, 999, 200)]
Row = dict
# gemm_wgmma with 64-byte TMA boxes (32 bf16 of K, 64-byte swizzle): every box row of A and W lies inside one
# 128-byte line even when rows are 8000 bytes apart. A k-tile of 64 is two boxes per operand; the wgmma
# descriptors use swizzle mode 2 (64B) with 8-row groups 512 bytes apart.
WGMMA64_PRELUDE = r"""
__device__ inline uint64_t desc64(const void* smem) {
    const uint64_t addr = cc_hopper_smem(smem);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(512 >> 4) << 32) | (2ull << 62);
}
static inline bool tmap64(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows) {
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn)
        return false;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    const cuuint32_t box[2] = {32, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    return reinterpret_cast<Encode>(fn)(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides,
                                        box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
           CUDA_SUCCESS;
}
"""
WGMMA64_SUBS = [
    ("tma_load_2d(a_s + s * kHTileA, &map_a, t * kHBK, row0, &full[s]);\n"
     "                tma_load_2d(w_s + s * kHTileB, &map_w, t * kHBK, col0, &full[s]);",
     "for (int h = 0; h < 2; ++h) {\n"
     "                    tma_load_2d(a_s + s * kHTileA + h * kHBM * 32, &map_a, t * kHBK + 32 * h, row0, &full[s]);\n"
     "                    tma_load_2d(w_s + s * kHTileB + h * kHBN * 32, &map_w, t * kHBK + 32 * h, col0, &full[s]);\n"
     "                }"),
    ("a_s + (wg - 1) * 64 * kHBK;", "a_s + (wg - 1) * 64 * 32;"),
    ("wgmma_m64n256k16_bf16(d, wgmma_desc(as + kk * 16), wgmma_desc(ws + kk * 16), 1);",
     "wgmma_m64n256k16_bf16(d, desc64(as + (kk / 2) * kHBM * 32 + (kk % 2) * 16),\n"
     "                                          desc64(ws + (kk / 2) * kHBN * 32 + (kk % 2) * 16), 1);"),
    ("if (!cc_make_tmap_bf16(&map_a, A, M, K, kHBM) || !cc_make_tmap_bf16(&map_w, W, N, K, kHBN)) return;",
     "if (!tmap64(&map_a, A, M, K, kHBM) || !tmap64(&map_w, W, N, K, kHBN)) return;"),
    ('#include "cc_hopper.h"\n', '#include "cc_hopper.h"\n' + WGMMA64_PRELUDE),
]


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
    """Random fp16 operands (and their bf16 copies) of one GEMM shape, A and W stored with row stride ``ld``."""

    def __init__(self, M: int, N: int, K: int, ld: int | None = None) -> None:
        self.M, self.N, self.K, self.ld = M, N, K, ld or K
        g = torch.Generator(device="cuda").manual_seed(M * 31 + N * 7 + K)
        self.Abuf = torch.randn(M, self.ld, device="cuda", generator=g).bfloat16()
        self.Wbuf = torch.randn(N, self.ld, device="cuda", generator=g).bfloat16()
        self.A, self.W = self.Abuf[:, :K], self.Wbuf[:, :K]  # views: rows ld apart
        self.Ah, self.Wh = self.A.contiguous().half(), self.W.contiguous().half()
        self.C = torch.empty(M, N, device="cuda")
        self.Ch = torch.empty(M, N, device="cuda", dtype=torch.half)
        self.ref = self.A.float() @ self.W.float().T
        self.flops = 2 * M * N * K
        self.name = f"{M}x{N}x{K}" + ("" if self.ld == K else f" (A, W rows {self.ld} apart)")


def cublas_row(group: str, s: Shape) -> Row:
    """cuBLAS fp16 (torch.matmul writing fp16, as the lesson bench) on the shape's operands."""
    ms, sp = bench.time_stats(lambda: torch.matmul(s.Ah, s.Wh.T, out=s.Ch))
    return dict(group=group, name="cuBLAS torch.matmul fp16 (reference)", ms=ms, spread=sp,
                tflops=s.flops / ms / 1e9, err=None)


def gemm_row(group: str, name: str, s: Shape, fn: Callable[[], object], ref_ms: float) -> Row:
    """Check ``fn`` (writes s.C) on NaN-poisoned C, then time it."""
    s.C.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    err = rel_err(s.C, s.ref)
    ms, sp = bench.time_stats(fn)
    return dict(group=group, name=name, ms=ms, spread=sp, tflops=s.flops / ms / 1e9, err=err, vs_ref=ref_ms / ms,
                ok=err < 1e-3)


def small_checks(fn: Callable, name: str) -> float:
    """Worst relative error of fn(A, W, C, M, N, K) over CHECKS; inf when any output is left unwritten."""
    worst = 0.0
    for M, N, K in CHECKS:
        s = Shape(M, N, K)
        s.C.fill_(float("nan"))
        fn(s.A.contiguous(), s.W.contiguous(), s.C, M, N, K)
        torch.cuda.synchronize()
        e = rel_err(s.C, s.ref)
        log(f"  check {name} {M}x{N}x{K}: {e:.2e}")
        worst = max(worst, e)
    return worst


def table(rows: list[Row], title: str) -> str:
    """The rows as a markdown table."""
    lines = [f"## {title}", "", "| group | version | ms | spread | TFLOP/s | vs cuBLAS | rel. err | check |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        vs = f"{r['vs_ref']:.3f}x" if "vs_ref" in r else ""
        er = "" if r.get("err") is None else f"{r['err']:.2e}"
        ok = "" if "ok" not in r else ("ok" if r["ok"] else "FAIL")
        lines.append(f"| {r['group']} | {r['name']} | {r['ms']:.4f} | {r['spread']:.3f} | {r['tflops']:.1f} | {vs} "
                     f"| {er} | {ok} |")
    return "\n".join(lines) + "\n"


def write(out_dir: Path, stem: str, info: dict, parts: list[tuple[str, list[Row]]], notes: list[str]) -> str:
    """Write STEM.md / STEM.json with what has been measured so far; return the markdown."""
    md = f"# mma18 sweep: {info['gpu']}, torch {torch.__version__}, CUDA {torch.version.cuda}\n\n"
    md += "\n".join(table(rows, title) for title, rows in parts)
    if notes:
        md += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    (out_dir / f"{stem}.md").write_text(md)
    (out_dir / f"{stem}.json").write_text(json.dumps({"machine": info, "parts": parts, "notes": notes},
                                                         indent=1, default=str))
    return md


def part1(tm, hop) -> list[Row]:
    """gemm_wgmma's kernel at ragged sizes, with chosen row strides and L2 promotions, next to cuBLAS."""
    diag: list[Row] = []
    cases = [((4096, 4096, 4096, None), [(4096, 3)]),
             ((4000, 4000, 4000, None), [(4000, 3), (4000, 0), (4000, 2)]),
             ((4000, 4000, 4000, 4096), [(4096, 3)]),
             ((4000, 4000, 4096, None), [(4096, 3)]),
             ((4096, 4096, 4000, None), [(4000, 3)]),
             ((4032, 4032, 4032, None), [(4032, 3)])]
    promo = {0: "none", 2: "128B", 3: "256B (the solution's)"}
    for (M, N, K, ld), runs in cases:
        s = Shape(M, N, K, ld)
        group = f"gemm {s.name}"
        cub = cublas_row(group, s)
        diag.append(cub)
        if ld is None and (M, N, K) in ((4000, 4000, 4000), (4096, 4096, 4096)):
            diag.append(gemm_row(group, "solution gemm_wgmma", s,
                                 lambda s=s: hop.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
        for ldv, p in runs:
            fn = (lambda s=s, ldv=ldv, p=p: tm.wgmma_ld(s.Abuf, s.Wbuf, s.C, s.M, s.N, s.K, ldv, p))
            diag.append(gemm_row(group, f"wgmma kernel, ld {ldv}, L2 promotion {promo[p]}", s, fn, cub["ms"]))
        log(f"{group} done")
    return diag


def part3(hop, notes: list[str]) -> list[Row]:
    """gemm_wgmma with 64-byte TMA boxes (WGMMA64_SUBS): checked, then timed next to the solution and cuBLAS."""
    import tempfile

    ws = import_file(ROOT / "benchmarks/wgmma_sweep.py", "mma18_wgmma_sweep")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        m64 = ws.build("wgmma_box64", WGMMA64_SUBS, Path(tmp))
        log("wgmma_box64 built")
        worst = small_checks(m64.gemm_wgmma, "wgmma_box64")
        notes.append(f"wgmma_box64: worst relative error of the small ragged checks {worst:.2e}")
        for M, N, K in [(4096, 4096, 4096), (4000, 4000, 4000), (4096, 4096, 1024)]:
            s = Shape(M, N, K)
            group = f"gemm {s.name}"
            cub = cublas_row(group, s)
            rows.append(cub)
            rows.append(gemm_row(group, "solution gemm_wgmma (128-byte boxes)", s,
                                 lambda s=s: hop.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
            r = gemm_row(group, "wgmma_box64 (64-byte boxes, 64-byte swizzle)", s,
                         lambda s=s: m64.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"])
            r["ok"] = r["ok"] and worst < 1e-3
            rows.append(r)
            log(f"{group} done")
    return rows


def part2(tm, hop, sol, ck, skc, notes: list[str]) -> list[Row]:
    """mma.sync fed by TMA against task 5.6, gemm_wgmma, cuBLAS fp16 and both ceilings."""
    tma: list[Row] = []
    worst = {}
    for v in TMA_VARIANTS:
        worst[v] = small_checks(getattr(tm, v), v)
    notes.append("worst relative error of the small ragged checks " + str(CHECKS) + ": "
                 + ", ".join(f"{v} {e:.2e}" for v, e in worst.items()))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for M, N, K in [(4096, 4096, 4096), (4096, 4096, 1024), (4000, 4000, 4000)]:
        s = Shape(M, N, K)
        group = f"gemm {s.name}"
        cub = cublas_row(group, s)
        tma.append(cub)
        tma.append(gemm_row(group, "task 5.6 mma_gemm_pipelined (cp.async)", s,
                            lambda s=s: sol.mma_gemm_pipelined(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
        for v in TMA_VARIANTS:
            f = getattr(tm, v)
            r = gemm_row(group, f"{v} (mma.sync fed by TMA)", s, lambda s=s, f=f: f(s.A, s.W, s.C, s.M, s.N, s.K),
                         cub["ms"])
            r["ok"] = r["ok"] and worst[v] < 1e-3
            tma.append(r)
        tma.append(gemm_row(group, "task 5.12 gemm_wgmma", s,
                            lambda s=s: hop.gemm_wgmma(s.A, s.W, s.C, s.M, s.N, s.K), cub["ms"]))
        if (M, N, K) == (4096, 4096, 4096):
            blocks, iters = sms * 8, 4096  # as lessons/05_tensor_cores/bench.py
            cout = torch.empty(blocks * 128, device="cuda")
            flops = blocks * 4 * iters * 8 * 2 * 16 * 8 * 16
            ms, sp = bench.time_stats(lambda c=cout, b=blocks, i=iters: ck.mma_ceiling(c, b, i))
            tma.append(dict(group=group, name="mma.sync ceiling (registers only)", ms=ms, spread=sp,
                            tflops=flops / ms / 1e9, err=None))
            kblocks, kiters = sms * 3 * 4, 1024
            ops = torch.randn(2 * 128 * 32, device="cuda").bfloat16()
            kout = torch.empty(kblocks * 128, device="cuda")
            kflops = kblocks * 4 * kiters * 2 * 32 * 2 * 16 * 8 * 16
            ms, sp = bench.time_stats(lambda o=ops, c=kout, b=kblocks, i=kiters: skc.mma_smem_ceiling(o, c, b, i))
            tma.append(dict(group=group, name="mma.sync ceiling (ldmatrix from shared memory, random operands)",
                            ms=ms, spread=sp, tflops=kflops / ms / 1e9, err=None))
        tma.append(dict(cublas_row(group, s), name="cuBLAS torch.matmul fp16, timed again after the kernels"))
        log(f"{group} done")
        del s
    return tma


TITLES = {"1": "1. gemm_wgmma (task 5.12's kernel) at ragged sizes: tensor-map row stride and L2 promotion",
          "2": "2. mma.sync fed by TMA against task 5.6 (cp.async), gemm_wgmma, cuBLAS fp16 and the ceilings",
          "3": "3. gemm_wgmma with 64-byte TMA boxes (a candidate fix of 1)"}


def main() -> None:
    """Build, check and time the chosen parts; write the tables under OUT_FOLDER."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--parts", default="1,3,2", help="comma-separated parts, in order (default 1,3,2)")
    args = ap.parse_args()
    chosen = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not chosen or any(p not in TITLES for p in chosen):
        raise SystemExit(f"--parts takes a comma-separated list of {sorted(TITLES)}, got {args.parts!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    info = bench.machine_info()
    log(f"{info['gpu']}, torch {torch.__version__}, parts {chosen}")
    src = (ROOT / "benchmarks/mma18_tma.cu").read_text()
    src = src.replace("@MMA@", str(SOL / "cc_mma.h")).replace("@HOPPER@", str(SOL / "gemm_hopper.cu"))
    tm = cc.load(src, TMA_VARIANTS + ["wgmma_ld"], backend="cuda")
    hop = cc.load(SOL / "gemm_hopper.cu", ["gemm_wgmma", "gemm_wgmma_supported"], backend="cuda")
    ok = torch.zeros(1, dtype=torch.int32, device="cuda")
    hop.gemm_wgmma_supported(ok)
    if int(ok.item()) != 1:
        raise SystemExit("no sm_90a code in this build: run with TORCH_CUDA_ARCH_LIST=9.0a on a Hopper GPU")
    log("built")
    parts: list[tuple[str, list[Row]]] = []
    notes: list[str] = []
    stem = "mma18_sweep_" + "".join(chosen)
    for p in chosen:
        rows: list[Row] = []
        parts.append((TITLES[p], rows))
        try:
            if p == "1":
                rows += part1(tm, hop)
            elif p == "3":
                rows += part3(hop, notes)
            else:
                sol = cc.load(SOL / "gemm_tc.cu", ["mma_gemm_pipelined"], backend="cuda")
                b5 = import_file(ROOT / "lessons/05_tensor_cores/bench.py", "mma18_bench05")
                header = str(SOL / "cc_mma.h")
                ck = cc.load(b5.CEILING_SRC.replace("@HEADER@", header), ["mma_ceiling"], backend="cuda")
                skc = cc.load(b5.SMEM_CEILING_SRC.replace("@HEADER@", header), ["mma_smem_ceiling"], backend="cuda")
                rows += part2(tm, hop, sol, ck, skc, notes)
        except Exception as e:  # noqa: BLE001 - keep what was measured; a trap ends the CUDA context
            notes.append(f"part {p} stopped: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            log(notes[-1])
            write(args.out, stem, info, parts, notes)
            raise
        write(args.out, stem, info, parts, notes)
    print(write(args.out, stem, info, parts, notes), flush=True)


if __name__ == "__main__":
    main()
