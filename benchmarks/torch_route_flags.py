"""Does the binding's header set or nvcc's host optimisation level shorten a torch-route build? Builds
``solutions/01_relu/relu_torch.cu`` through the course loader four times in fresh build folders, changing the
arguments the loader gives ``load_inline`` ("light": the binding includes <torch/types.h> and pybind's casters
instead of <torch/extension.h>; "-O1"/"-O0": nvcc's host level instead of -O3), and prints ninja's step times.

    python benchmarks/torch_route_flags.py        (GPU machine; output: results/.../grade_profile/)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

LIGHT = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>\n"
VARIANTS = ("asis", "light", "light-O1", "light-O0")


def build_one(variant: str, path: str) -> None:
    """In a child process: build ``path`` with ``variant``'s arguments and check one call."""
    import torch
    from torch.utils import cpp_extension

    from cudacourse import loader

    original = cpp_extension.load_inline

    def patched(*args: object, **kw: object) -> object:
        if "light" in variant:
            kw["cpp_sources"] = [LIGHT + "\n".join(kw["cpp_sources"])]  # type: ignore[arg-type]
            kw["no_implicit_headers"] = True
        for level in ("O0", "O1"):
            if level in variant:
                kw["extra_cuda_cflags"] = [f"-{level}"]
        return original(*args, **kw)

    cpp_extension.load_inline = patched
    m = loader.load(path, backend="cuda")
    x = torch.randn(1000, device="cuda")
    print("correct:", bool((m.relu_forward(x) == x.clamp_min(0)).all()))


def main() -> None:
    """Each variant in a fresh folder and process, one after another."""
    src = (Path.cwd() / "solutions/01_relu/relu_torch.cu").read_text()
    for v in VARIANTS:
        d = Path(f"/tmp/rt-{v}")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        (d / "relu_torch.cu").write_text(src)
        t0 = time.time()
        r = subprocess.run([sys.executable, __file__, v, str(d / "relu_torch.cu")], capture_output=True, text=True,
                           env={**os.environ, "CUDA_COURSE_BUILD": str(d / "b")})
        tail = r.stderr[-600:] if r.returncode else ""
        print(f"== {v}: rc {r.returncode} {time.time() - t0:.1f} s {r.stdout.strip()} {tail}")
        for log in (d / "b").rglob(".ninja_log"):
            for line in log.read_text().splitlines()[1:]:
                start, end, _, out, _ = line.split("\t")
                print(f"   {out}: {(int(end) - int(start)) / 1000:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        build_one(sys.argv[1], sys.argv[2])
    else:
        main()
