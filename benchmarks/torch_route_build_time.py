"""How long the cuda backend's torch route takes to build lesson 01's relu_torch.cu, and where the time goes.

    python3 benchmarks/torch_route_build_time.py      (on the GPU machine: nvcc, ninja, torch with CUDA)

Builds the file with ``cudacourse.cuda_backend.build_torch_cuda`` (``load_inline``: the generated pybind11 binding
``main.cpp`` through g++, the kernel file through nvcc, then the link) in a fresh build folder, so nothing is cached,
and prints the wall time and ninja's own record of each step (``.ninja_log``: start and end in ms). A cold grade of
lessons 01-07 waits for this build longer than for any other (issue 35: 43 s of a 103 s grade on the H200).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    """Build once in a fresh folder; print the times."""
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    import torch

    if not torch.version.cuda:
        print("torch_route_build_time.py builds with a CUDA build of torch (its headers and nvcc); this torch "
              f"({torch.__version__}) has none. Run it on the GPU machine.", file=sys.stderr)
        return 2
    os.environ["CUDA_COURSE_BUILD"] = tempfile.mkdtemp(prefix="torch-route-")
    sys.path.insert(0, str(ROOT))
    from cudacourse import cuda_backend

    path = ROOT / "solutions" / "01_relu" / "relu_torch.cu"
    t0 = time.perf_counter()
    cuda_backend.build_torch_cuda(path.read_text(), str(path), ["scale_forward", "relu_forward"])
    print(f"relu_torch.cu on the torch route: {time.perf_counter() - t0:.1f} s wall (cores: {os.cpu_count()})")
    for log in Path(os.environ["CUDA_COURSE_BUILD"]).rglob(".ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            start, end, _, target, _ = line.split("\t")
            print(f"  {target:30s} {int(start) / 1000:6.1f} s -> {int(end) / 1000:6.1f} s "
                  f"({(int(end) - int(start)) / 1000:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
