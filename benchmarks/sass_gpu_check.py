"""On a GPU machine: is the SASS that `make sass` shows the code the cuda backend runs there? (issue 39, item 1)

For every kernel-only file of ``solutions/`` (the torch::Tensor route files are left out: torch builds those),
this compares, kernel by kernel, the SASS the sass verb shows (cudacourse/sass.py: ``nvcc -cubin`` for this GPU's
architecture, disassembled) with ``cuobjdump -sass`` of the shared library the cuda backend built and loaded for
the same file (``cc.load(path, backend="cuda")``, i.e. ``cuda_backend.build_cuda``). Verdict per kernel:

- ``SAME``: the same instructions in the same order (opcodes and operands);
- ``SAME MIX``: the same opcodes, each as many times (the instruction mix), in another order or with other
  registers;
- ``DIFFERENT``: the mix differs (the opcodes whose counts differ are listed); ``MISSING``: the kernel is in
  one listing only.

It also runs a few launchers once on the GPU (random inputs), so that the library compared is one that ran.
Writes ``OUT/sass_check.txt`` (one line per kernel, then a summary line) and ``OUT/sass_check.json``; exit status
0 when every kernel is SAME or SAME MIX.

    python3 benchmarks/sass_gpu_check.py --out DIR      # on the GPU machine (nvcc and cuobjdump on the PATH)
    python3 benchmarks/sass_gpu_check.py --out DIR --lessons 01_relu 02_reduce

The comparison (``compare``, ``verdict``) is tested on the CPU against a shared library nvcc builds there the way
the backend's nvcc path does (tests/test_sass.py).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cudacourse import sass  # noqa: E402

# Launchers run once on the GPU before the comparison (the library they ran from is the one compared).
RUN = [("01_relu", "relu_v3_float4"), ("02_reduce", "warp_sum"), ("04_transformer", "softmax_v2_warp_per_row"),
       ("05_tensor_cores", "mma_gemm")]


def opcodes(instructions: list[str]) -> list[str]:
    """Opcodes of SASS instructions, guards dropped: ``@!P0 LDG.E.128 R4, ...`` -> ``LDG.E.128``."""
    return [sass.unpredicated(i).split()[0] for i in instructions if i.strip()]


@dataclass
class KernelVerdict:
    """One kernel's comparison: the file, the kernel's mangled name, the verdict and what differs."""

    file: str
    kernel: str
    verdict: str
    shown: int = 0      # instructions in the sass verb's listing
    ran: int = 0        # instructions in the loaded library's
    differ: dict[str, list[int]] = field(default_factory=dict)  # opcode -> [count shown, count ran]

    def line(self) -> str:
        """The summary line of this kernel."""
        head = f"{self.verdict:9s} {self.file} {sass.base_name(self.kernel)}: {self.shown} instructions shown, " \
               f"{self.ran} in the library"
        diff = ", ".join(f"{op} {a} vs {b}" for op, (a, b) in sorted(self.differ.items())[:8])
        return head + (f"; differ: {diff}" if diff else "")


def verdict(shown: list[str], ran: list[str]) -> tuple[str, dict[str, list[int]]]:
    """``SAME`` (same instructions in order), ``SAME MIX`` (same opcode counts) or ``DIFFERENT`` (with the opcodes
    whose counts differ) for two kernels' instruction lists."""
    if shown == ran:
        return "SAME", {}
    a, b = Counter(opcodes(shown)), Counter(opcodes(ran))
    if a == b:
        return "SAME MIX", {}
    return "DIFFERENT", {op: [a[op], b[op]] for op in sorted(set(a) | set(b)) if a[op] != b[op]}


def compare(file: str, shown: dict[str, list[str]], ran: dict[str, list[str]]) -> list[KernelVerdict]:
    """Kernel-by-kernel verdicts for one file: ``shown``/``ran`` map mangled names to instruction lists."""
    out = []
    # (the host-work check's own kernel, cudacourse/hostwork.cu, is linked into every library: not the file's)
    ran = {k: v for k, v in ran.items() if not k.startswith("cc_hw_")}
    for k in sorted(set(shown) | set(ran)):
        if k not in shown or k not in ran:
            out.append(KernelVerdict(file, k, "MISSING", len(shown.get(k, [])), len(ran.get(k, [])),
                                     {"(only in " + ("the library" if k in ran else "the sass listing") + ")": [0, 0]}))
            continue
        v, diff = verdict(shown[k], ran[k])
        out.append(KernelVerdict(file, k, v, len(shown[k]), len(ran[k]), diff))
    return out


def cuobjdump_listing(lib: Path, tool: str = "cuobjdump") -> dict[str, list[str]]:
    """Instructions per mangled kernel in a shared library or cubin, by ``cuobjdump -sass``."""
    text = subprocess.run([tool, "-sass", str(lib)], capture_output=True, text=True, check=True).stdout
    return {k: [r[1] for r in rows] for k, rows in sass.parse_listing(text).items()}


def shown_listing(path: Path, arch: str) -> dict[str, list[str]]:
    """Instructions per mangled kernel as the sass verb shows them for ``path`` (its cubin, disassembled), without
    nvdisasm's annotations (``(*"SpillRefill"*)`` after a spill), which cuobjdump does not print."""
    listing, _tool = sass._sass_listing(sass.build(path, arch) / "k.cubin")
    return {k: [re.sub(r"\s*\(\*.*?\*\)", "", r[1]) for r in rows] for k, rows in listing.items()}


def kernel_files(lessons: list[str] | None) -> list[Path]:
    """The kernel-only .cu files of the solutions (no torch::Tensor route), of ``lessons`` or of every lesson."""
    from cudacourse.source import uses_torch

    files = sorted((ROOT / "solutions").glob("*/*.cu"))
    return [f for f in files if (not lessons or f.parent.name in lessons) and not uses_torch(f.read_text())]


def main(argv: list[str] | None = None) -> int:
    """Build, run, disassemble, compare, write."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for sass_check.txt and sass_check.json")
    ap.add_argument("--lessons", nargs="*", default=None, help="lesson folders (default: all)")
    a = ap.parse_args(argv)
    import torch

    import cudacourse as cc
    from cudacourse import loader
    from cudacourse.profile_cli import random_args

    if not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU: this check runs on the GPU machine (tests/test_sass.py tries its "
              "comparison on the CPU, on a library nvcc builds there)")
        return 2
    try:
        nvcc, cuobjdump = sass.require_tool("nvcc"), sass.require_tool("cuobjdump")
    except sass.ToolMissing as e:
        print(f"error: {e}")
        return 2
    arch = loader.cuda_arch()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip() or "?"
    lines = [f"GPU: {torch.cuda.get_device_name()}; arch {arch}; nvcc {nvcc} ({version.splitlines()[-1]}); "
             f"cuobjdump {cuobjdump}"]
    for lesson, fn in RUN:
        if a.lessons and lesson not in a.lessons:
            continue
        try:
            m = cc.load(sass.kernel_file(lesson, fn, "solution"), [fn], backend="cuda")
            args = [x.cuda() if hasattr(x, "cuda") else x for x in random_args(m.launchers[fn], None)]
            getattr(m, fn)(*args)
            torch.cuda.synchronize()
            lines.append(f"ran {lesson} {fn} on the GPU")
        except Exception as e:  # noqa: BLE001 - said in the summary; the comparison goes on
            lines.append(f"could not run {lesson} {fn}: {type(e).__name__}: {e}")
    verdicts: list[KernelVerdict] = []
    for path in kernel_files(a.lessons):
        rel = str(path.relative_to(ROOT))
        try:
            m = cc.load(path, backend="cuda")
            lib = loader.build_cuda(path.read_text(), str(path.resolve()), list(m.launchers.values()))
            verdicts += compare(rel, shown_listing(path, arch), cuobjdump_listing(lib, cuobjdump))
        except Exception as e:  # noqa: BLE001 - a file that does not build here is reported, not fatal
            verdicts.append(KernelVerdict(rel, "(file)", "ERROR", differ={f"{type(e).__name__}: {e}"[:200]: [0, 0]}))
    lines += [v.line() for v in verdicts]
    count = Counter(v.verdict for v in verdicts)
    ok = all(v.verdict in ("SAME", "SAME MIX") for v in verdicts) and bool(verdicts)
    lines.append(f"summary: {len(verdicts)} kernels: " + ", ".join(f"{n} {k}" for k, n in sorted(count.items())) +
                 (" -> the SASS shown is what the cuda backend runs" if ok else " -> see the lines above"))
    print("\n".join(lines))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "sass_check.txt").write_text("\n".join(lines) + "\n")
    (a.out / "sass_check.json").write_text(json.dumps(
        {"header": lines[0], "kernels": [asdict(v) for v in verdicts], "summary": dict(count), "ok": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
