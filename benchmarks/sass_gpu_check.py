"""On a GPU machine: does `python -m cudacourse sass` show the code that runs there? (issue 39, item 1)

For a few launchers, this compares the SASS the sass verb shows (cudacourse/sass.py: nvcc -cubin for sm_90a)
with ``cuobjdump -sass`` of the library the cuda backend built and loaded for the same file
(``loader.build_cuda``: the .so that ``cc.lesson(..., backend="cuda")`` calls), opcode by opcode, and runs each
launcher once on the GPU so the library is the one that ran. Prints one line per kernel and writes the same lines
to results/<gpu>/sass_check.txt.

    python3 benchmarks/sass_gpu_check.py        # on the GPU machine (nvcc and cuobjdump on the PATH)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = [("01_relu", "relu_v3_float4"), ("02_reduce", "warp_sum"), ("04_transformer", "softmax_v2_warp_per_row"),
         ("05_tensor_cores", "mma_gemm")]


def opcodes(instructions: list[str]) -> list[str]:
    """Opcodes of SASS instructions, predicates dropped: ``@!P0 LDG.E.128 R4, ...`` -> ``LDG.E.128``."""
    return [re.sub(r"^@!?U?P\w+\s+", "", i).split()[0] for i in instructions if i.strip()]


def cuobjdump_sass(lib: Path, mangled: str) -> list[str]:
    """The SASS instructions of one kernel in a shared library, by cuobjdump."""
    out = subprocess.run(["cuobjdump", "-sass", "-fun", mangled, str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", out)]


def main() -> int:
    """Compare, print, write."""
    import torch

    import cudacourse as cc
    from cudacourse import loader, sass
    from cudacourse.bench import slug
    from cudacourse.profile import random_args

    lines = [f"GPU: {torch.cuda.get_device_name()}, nvcc: {sass.find_tool('nvcc')}, arch {loader.cuda_arch()}"]
    ok = True
    for lesson, fn in CASES:
        rep = sass.sass(lesson, fn, impl="solution")
        m = cc.load(rep.path, [fn], backend="cuda")
        # the library the module loaded (build_cuda is cached by content: the same call returns its path)
        lib = loader.build_cuda(rep.path.read_text(), str(rep.path), list(m.launchers.values()))
        args = [a.cuda() if hasattr(a, "cuda") else a for a in random_args(m.launchers[fn], None)]
        getattr(m, fn)(*args)
        torch.cuda.synchronize()
        for k in rep.kernels:
            ran = opcodes(cuobjdump_sass(lib, k.mangled))
            shown = opcodes(k.instructions)
            same = ran == shown
            ok &= same
            lines.append(f"{lesson} {fn} {sass.base_name(k.mangled)}: {'SAME' if same else 'DIFFERENT'} "
                         f"({len(shown)} instructions shown, {len(ran)} in the loaded library {lib.name})")
    print("\n".join(lines))
    out = ROOT / "results" / slug(torch.cuda.get_device_name()) / "sass_check.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
