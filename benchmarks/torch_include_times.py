"""Where the build time of a torch-route file goes: ``solutions/01_relu/relu_torch.cu`` built by the course
loader (``load_inline`` with pybind11) in a fresh build folder, once as committed and once with
``<torch/extension.h>`` in place of ``<torch/types.h>`` (what most extensions include), reading each compile
step's seconds from ninja's log (``main.o``: the binding, host compiler; ``cuda.cuda.o``: the file, nvcc).

    python benchmarks/torch_include_times.py        (GPU machine; prints the table)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPES, EXTENSION = "#include <torch/types.h>", "#include <torch/extension.h>"


def main() -> None:
    """Build both variants one after another (nothing else running) and print their step times."""
    src = (ROOT / "solutions" / "01_relu" / "relu_torch.cu").read_text()
    assert TYPES in src, "relu_torch.cu no longer includes <torch/types.h>"
    for name, text in (("<torch/extension.h>", src.replace(TYPES, EXTENSION, 1)), ("<torch/types.h>", src)):
        d = Path(f"/tmp/torch-include-{'ext' if 'extension' in name else 'types'}")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        path = d / "relu_torch.cu"
        path.write_text(text)
        code = (f"from cudacourse import loader; import torch; m = loader.load({str(path)!r}, backend='cuda'); "
                "x = torch.randn(1000, device='cuda'); print(bool((m.relu_forward(x) == x.clamp_min(0)).all()))")
        t0 = time.time()
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "CUDA_COURSE_BUILD": str(d / "build")},
                           capture_output=True, text=True, cwd=ROOT)
        print(f"== {name}: rc {r.returncode}, build and check {time.time() - t0:.1f} s, correct: {r.stdout.strip()}"
              f"{r.stderr[-800:] if r.returncode else ''}")
        for log in (d / "build").rglob(".ninja_log"):
            for line in log.read_text().splitlines()[1:]:
                start, end, _, out, _ = line.split("\t")
                print(f"   {out}: {(int(end) - int(start)) / 1000:.1f} s")


if __name__ == "__main__":
    main()
