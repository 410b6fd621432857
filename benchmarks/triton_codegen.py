"""What Triton generates for the course's Triton twins, compiled for an H100 (sm_90) on any machine, no GPU needed.

For every autotuned kernel of every ``solutions/NN_topic/*_triton.py`` (or ``lessons/`` with ``--impl student``),
this compiles one configuration to PTX and SASS-ready cubin (Triton's bundled ptxas; no driver) and prints what the
explainers' "The same kernels in Triton" sections cite: the width of the global loads and stores, the warp
shuffles, barriers and shared memory the compiler added, the atomics, the float32 FMAs and cp.async copies of the
tiled kernels, and the rounding of divisions and square roots. Each kernel is compiled twice where it
matters: with its pointers 16-byte aligned and its integer arguments multiples of 16 (how Triton specializes a
call whose arguments are), and without.

Run it:  .venv/bin/python benchmarks/triton_codegen.py > benchmarks/triton_codegen.txt
(committed output: benchmarks/triton_codegen.txt; needs the triton package: make setup EXTRAS=triton).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# scalar float arguments of the twins' kernels; other scalars are int32
FLOAT_ARGS = {"a", "eps", "qk_scale", "inv_count", "lr", "beta1", "beta2", "weight_decay", "step_size",
              "inv_bc2_sqrt", "temperature", "p"}
INT_POINTERS = {"labels_ptr", "ids_ptr"}  # int32 pointers; other pointers are float32
INT64_POINTERS = {"work_ptr"}  # int64 pointers (lesson 09's scan: the ticket and the status words)
PICK = {"BLOCK": 4096, "num_warps": 8}  # the configuration compiled (the first one with these values) ...
# ... or, for the tiled kernels, the first one with these: the configs the H100 kept in
# results/nvidia-h100-80gb-hbm3/triton_twins/results.md (sgemm at 2048^3 and 4096^3) and
# results/nvidia-h100-80gb-hbm3/flash21/results.md (attention at d = 64)
PICK_BY_KERNEL = {"sgemm_kernel": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8},
                  "attention_flash_kernel": {"BQ": 64, "BK": 32, "num_warps": 8}}
EXTRA_CONSTEXPRS = {"NPROG": 528, "GROUP_M": 8, "BLOCK_D": 64, "VEC": 4,  # constexprs the wrappers pass (not tuned)
                    "USE_P": True}
# ... per kernel, and pointers that are not float32 (lesson 08: bf16 in, e4m3 out; rows of 4096 values)
EXTRA_BY_KERNEL = {"quant_1x128_kernel": {"BLOCK_N": 4096}, "rmsnorm_quant_1x128_kernel": {"BLOCK_N": 4096}}
PTR_BY_KERNEL = {"quant_1x128_kernel": {"x_ptr": "*bf16", "y_ptr": "*fp8e4nv"},
                 "rmsnorm_quant_1x128_kernel": {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*fp8e4nv"}}


def kernels(path: Path) -> list[tuple[str, object]]:
    """(name, autotuner) of every autotuned kernel in a twin file, in file order."""
    from triton.runtime.autotuner import Autotuner

    from cudacourse.loader import import_file

    mod = import_file(path, f"codegen_{path.parent.name}_{path.stem}")
    return [(n, v) for n, v in vars(mod).items() if isinstance(v, Autotuner)]


def pick_config(configs: list, name: str = "") -> object:
    """The config compiled: for kernel ``name`` in PICK_BY_KERNEL the first matching it; else the first with
    BLOCK=4096 and 8 warps, else the first with BLOCK=4096, else the first."""
    wants = [PICK_BY_KERNEL[name]] if name in PICK_BY_KERNEL else [PICK, {"BLOCK": PICK["BLOCK"]}]
    for want in wants:
        for c in configs:
            if all(c.kwargs.get(k, getattr(c, k, None)) == v for k, v in want.items()):
                return c
    return configs[0]


def compile_one(tuner: object, aligned: bool, extra_constexprs: dict, name: str = "") -> tuple[str, object]:
    """PTX and the compiled kernel of ``tuner``'s picked config, with or without the 16-divisibility hints."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = tuner.fn
    cfg = pick_config(tuner.configs, name)
    params = list(inspect.signature(fn.fn).parameters)
    constexprs = {**extra_constexprs, **cfg.kwargs}
    sig, attrs = {}, {}
    for i, p in enumerate(params):
        if p in constexprs:
            sig[p] = "constexpr"
        elif p.endswith("_ptr"):
            sig[p] = PTR_BY_KERNEL.get(name, {}).get(p, "*i32" if p in INT_POINTERS else "*i64" if p in INT64_POINTERS
                                                      else "*fp32")
            if aligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif p in FLOAT_ARGS:
            sig[p] = "fp32"
        else:
            sig[p] = "i32"
            if aligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=sig, constexprs={p: constexprs[p] for p in params if p in constexprs},
                    attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
    return k.asm["ptx"], k


def summary(ptx: str, k: object) -> str:
    """One line: global load/store widths, shuffles, barriers, shared memory, atomics, and for the tiled kernels
    the float32 FMAs (a tl.dot in "ieee" precision) and asynchronous global-to-shared copies (cp.async: the
    pipelining of num_stages)."""
    def widths(op: str) -> str:
        found = sorted(set(re.findall(rf"\b{op}\.global(?:\.\w+)*?(\.v[248])?\.[bfu]32\b", ptx)))
        return "/".join({"": "4 B", ".v2": "8 B", ".v4": "16 B", ".v8": "32 B"}[w] for w in found) or "none"
    shfl = len(re.findall(r"\bshfl\.sync", ptx))
    bar = len(re.findall(r"\bbar\.sync|\bbarrier\.sync", ptx))
    atom = len(re.findall(r"\b(?:atom|red)\.global", ptx))
    smem = getattr(k.metadata, "shared", 0)
    fma = len(re.findall(r"\bfma\.rn\.f32", ptx))
    copies = re.findall(r"\bcp\.async\.(?:ca|cg)\.shared\.global\s*\[[^\]]*\],\s*\[[^\]]*\],\s*(0x[0-9a-f]+|\d+)", ptx)
    sizes = "/".join(f"{n} B" for n in sorted({int(c, 0) for c in copies}))
    cp_async = f"{len(copies)} ({sizes})" if copies else "0"
    mma = len(re.findall(r"\b(?:mma\.sync|wgmma\.mma_async)", ptx))
    tiled = f"; fma.rn.f32 {fma}, cp.async {cp_async}, mma {mma}" if (copies or mma) else ""
    # float32 divisions and square roots: .rn rounds as CUDA's / and sqrtf; .full / .approx are Triton's defaults
    forms = sorted(set(re.findall(r"\b((?:div|sqrt)\.[a-z.]+\.f32)", ptx)))
    rounding = f"; {' '.join(forms)}" if forms else ""
    return (f"loads {widths('ld')}, stores {widths('st')}; shfl.sync {shfl}, bar.sync {bar}, shared memory {smem} B, "
            f"global atomics {atom}{tiled}{rounding}")


def main(argv: list[str] | None = None) -> int:
    """Print one block per twin file."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=["solution", "student"], default="solution")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: this compiles the twins", file=sys.stderr)
        return 2
    import triton

    from cudacourse.course import course

    c = course(ROOT)
    print(f"triton {triton.__version__}, target sm_90 (H100), impl={args.impl}")
    for les in c:
        for f in les.triton_files:
            path = c.kernel_dir(les.id, args.impl) / f
            print(f"\n{les.id}/{f}")
            for name, tuner in kernels(path):
                cfg = pick_config(tuner.configs, name)
                params = inspect.signature(tuner.fn.fn).parameters
                extra = {k: v for k, v in {**EXTRA_CONSTEXPRS, **EXTRA_BY_KERNEL.get(name, {})}.items() if k in params}
                conf = ", ".join(f"{k}={v}" for k, v in {**cfg.kwargs, **extra}.items())
                for aligned in (True, False):
                    ptx, k = compile_one(tuner, aligned, extra, name)
                    what = "aligned, ints % 16 == 0" if aligned else "no alignment known    "
                    print(f"  {name} [{conf}, num_warps={cfg.num_warps}] {what}: {summary(ptx, k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
