"""Build times of lesson 01's kernel files, each step in a fresh Python process, on the current backend.

    .venv/bin/python benchmarks/build_times.py [REPORT] [--backend auto|cuda|sim]

REPORT defaults to ``$OUT/build_times.txt`` when ``$OUT`` is set, else only prints. A JSON file with the
same numbers is written next to it (``build_times.json``). Steps, each in its own process with its own
empty build folder (``CUDA_COURSE_BUILD``), so nothing is cached from earlier runs:

1. ``load_inline``: ``torch.utils.cpp_extension.load_inline`` of a small ReLU written the classic way
   (``torch::Tensor`` in and out, ``<torch/extension.h>`` included), the route task 1.6 teaches. On a
   GPU the kernel goes through nvcc; without one it is the same function as a C++ CPU extension (the
   torch headers are what costs, not the kernel).
2. ``torch route``: the course loader building ``solutions/01_relu/relu_torch.cu`` (the hand-written
   ``torch::Tensor`` binding of task 1.6): ``load_inline`` with pybind11 on a GPU, the simulator's torch
   route (g++ with the torch headers) on the CPU.
3. ``first build``: the course loader building ``solutions/01_relu/relu.cu`` (kernel-only file) into an
   empty build folder. On the simulator the runtime object and its precompiled headers are built first, timed
   separately.
4. ``reload after an edit``: a fresh process with the build folder of step 3, the file edited (a comment
   added), built again; then edited once more and rebuilt in the same process (the notebook loop).

Times are wall-clock seconds of the build call itself; ``process`` is the whole child process,
interpreter start and imports included. The simulator builds in checked mode (its default).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "solutions" / "01_relu" / "relu.cu"
RELU_TORCH = ROOT / "solutions" / "01_relu" / "relu_torch.cu"

# The classic route, minimal: one kernel, one torch::Tensor function (what task 1.6 writes).
INLINE_CUDA = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "bad x");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    if (n) relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
INLINE_CPP = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "bad x");
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] > 0.0f ? px[i] : 0.0f;
    return y;
}
"""


# ----------------------------------------------------------------------------------------------------
# Child steps (run in a fresh process; print one JSON object)
# ----------------------------------------------------------------------------------------------------


def _cpu_s() -> float:
    """CPU seconds used so far by this process and its finished children (the compilers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn):  # noqa: ANN001, ANN202
    """(result, wall seconds, CPU seconds) of ``fn()``: CPU time stays meaningful on a busy machine."""
    w, c = time.perf_counter(), _cpu_s()
    out = fn()
    return out, time.perf_counter() - w, _cpu_s() - c


def _check_relu(fn, device: str) -> None:
    """Call a built relu once so a broken build cannot pass as a fast one."""
    import torch

    x = torch.randn(1000, device=device)
    y = fn(x)
    assert torch.equal(y, torch.relu(x)), "the built relu gives wrong results"


def step_inline(backend: str) -> dict:
    """Step 1: load_inline with torch headers."""
    t0 = time.perf_counter()
    from torch.utils import cpp_extension

    imported = time.perf_counter() - t0
    d = Path(os.environ["CUDA_COURSE_BUILD"]) / "inline"
    d.mkdir(parents=True)
    if backend == "cuda":
        mod, build, cpu = _timed(lambda: cpp_extension.load_inline(
            "bt_relu_inline", cpp_sources=["torch::Tensor relu_forward(torch::Tensor x);"],
            cuda_sources=[INLINE_CUDA], functions=["relu_forward"], build_directory=str(d), verbose=False))
    else:
        mod, build, cpu = _timed(lambda: cpp_extension.load_inline(
            "bt_relu_inline", cpp_sources=[INLINE_CPP], functions=["relu_forward"], build_directory=str(d),
            verbose=False))
    _check_relu(mod.relu_forward, "cuda" if backend == "cuda" else "cpu")
    return {"build_s": build, "cpu_s": cpu, "import_s": imported}


def step_torch_route(backend: str) -> dict:
    """Step 2: the course loader on relu_torch.cu (torch headers, hand-written binding)."""
    t0 = time.perf_counter()
    import cudacourse as cc

    imported = time.perf_counter() - t0
    m, build, cpu = _timed(lambda: cc.load(RELU_TORCH, ["relu_forward"], backend=backend))
    _check_relu(m.relu_forward, str(m.device))
    return {"build_s": build, "cpu_s": cpu, "import_s": imported}


def step_first(backend: str) -> dict:
    """Step 3: the course loader on relu.cu into an empty build folder."""
    t0 = time.perf_counter()
    import torch

    import cudacourse as cc

    imported = time.perf_counter() - t0
    out: dict = {"import_s": imported, "runtime_object_s": 0.0, "runtime_object_cpu_s": 0.0}
    if backend == "sim":  # the runtime object, and its headers with ccsim.h precompiled: once per build folder
        from cudacourse.sim import runtime_headers, runtime_object

        _, out["runtime_object_s"], out["runtime_object_cpu_s"] = _timed(lambda: (runtime_object(),
                                                                                  runtime_headers()))
    m, out["build_s"], out["cpu_s"] = _timed(lambda: cc.load(os.environ["BT_SOURCE"], ["relu_v1_scalar"],
                                                             backend=backend))
    out["total_s"] = out["runtime_object_s"] + out["build_s"]
    out["total_cpu_s"] = out["runtime_object_cpu_s"] + out["cpu_s"]
    _check_relu(lambda x: (m.relu_v1_scalar(x, y := torch.empty_like(x), x.numel()), y)[1], str(m.device))
    return out


def _edit(path: Path, tag: str) -> None:
    path.write_text(path.read_text() + f"\n// edited by benchmarks/build_times.py: {tag}\n")


def step_reload(backend: str) -> dict:
    """Step 4: rebuild after an edit, in a fresh process and again in the same process."""
    t0 = time.perf_counter()
    import torch

    import cudacourse as cc

    imported = time.perf_counter() - t0
    src = Path(os.environ["BT_SOURCE"])
    _edit(src, f"fresh process {time.time_ns()}")
    m, fresh, fresh_cpu = _timed(lambda: cc.load(src, ["relu_v1_scalar"], backend=backend))
    m.close()
    _edit(src, f"same process {time.time_ns()}")
    m, same, same_cpu = _timed(lambda: cc.load(src, ["relu_v1_scalar"], backend=backend))
    _check_relu(lambda x: (m.relu_v1_scalar(x, y := torch.empty_like(x), x.numel()), y)[1], str(m.device))
    return {"import_s": imported, "build_s": fresh, "cpu_s": fresh_cpu, "same_process_s": same,
            "same_process_cpu_s": same_cpu}


STEPS = {"inline": step_inline, "torch_route": step_torch_route, "first": step_first, "reload": step_reload}


# ----------------------------------------------------------------------------------------------------
# Parent: run the steps, write the report
# ----------------------------------------------------------------------------------------------------


def _child(step: str, backend: str, env: dict) -> dict:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, "--child", step, "--backend", backend], env=env,
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if r.returncode:
        raise SystemExit(f"step {step} failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["process_s"] = wall
    return res


def _machine(backend: str) -> dict:
    import torch

    from cudacourse import loader

    info = {"host_cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "backend": backend, "load_average": os.getloadavg()[0]}
    if backend == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        nvcc = loader.nvcc_path()
        ver = subprocess.run([nvcc or "nvcc", "--version"], capture_output=True, text=True).stdout.strip()
        info["nvcc"] = ver.splitlines()[-1] if ver else "none"
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()
    info["g++"] = gxx[0] if gxx else "none"
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(machine: dict, res: dict) -> str:
    """The human-readable report (the JSON file holds the same numbers)."""
    where = machine.get("gpu") or f"CPU simulator, {machine['cores']} cores"
    lines = [f"# benchmarks/build_times.py: lesson 01 build times on {where}", "",
             "machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), "",
             "Each step in a fresh Python process with its own build folder. build s: wall-clock seconds of the",
             "build call; CPU s: CPU seconds it used (compilers included), which a busy machine inflates less;",
             "process s: the whole child process, interpreter start and imports included.", "",
             "| step | what is built | build s | CPU s | process s |", "|---|---|---:|---:|---:|"]
    inl, tr, first, rel = res["inline"], res["torch_route"], res["first"], res["reload"]

    def row(step: str, what: str, wall: float, cpu: float, proc: float | None = None) -> str:
        return f"| {step} | {what} | {wall:.1f} | {cpu:.1f} | {'' if proc is None else f'{proc:.1f}'} |"

    lines.append(row("load_inline, torch headers", "a small torch::Tensor ReLU", inl["build_s"], inl["cpu_s"],
                     inl["process_s"]))
    lines.append(row("course loader, torch route", "solutions/01_relu/relu_torch.cu", tr["build_s"], tr["cpu_s"],
                     tr["process_s"]))
    if machine["backend"] == "sim":
        lines.append(row("simulator runtime object and precompiled headers (once per build folder)",
                         "cudacourse/sim/runtime",
                         first["runtime_object_s"], first["runtime_object_cpu_s"]))
        lines.append(row("course loader, first build (runtime object already built)", "solutions/01_relu/relu.cu",
                         first["build_s"], first["cpu_s"]))
    lines.append(row("course loader, first build in an empty build folder", "solutions/01_relu/relu.cu",
                     first["total_s"], first["total_cpu_s"], first["process_s"]))
    lines.append(row("course loader, reload after an edit (fresh process)", "solutions/01_relu/relu.cu",
                     rel["build_s"], rel["cpu_s"], rel["process_s"]))
    lines.append(row("course loader, reload after an edit (same process)", "solutions/01_relu/relu.cu",
                     rel["same_process_s"], rel["same_process_cpu_s"]))
    lines += ["", f"import of torch and cudacourse in a fresh process: {first['import_s']:.1f} s"]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run every step in a fresh process and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", nargs="?", type=Path, help="report path (default $OUT/build_times.txt if $OUT is set)")
    ap.add_argument("--backend", default="auto", choices=["auto", "cuda", "sim"])
    ap.add_argument("--child", choices=list(STEPS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        print(json.dumps(STEPS[args.child](args.backend)))
        return

    from cudacourse.loader import backend_name

    backend = backend_name(args.backend)
    path = args.report or (Path(os.environ["OUT"]) / "build_times.txt" if os.environ.get("OUT") else None)
    machine = _machine(backend)  # before the steps: the load average says how busy the machine was
    res = {}
    with tempfile.TemporaryDirectory(prefix="cc-build-times-") as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        src = Path(tmp) / "relu.cu"
        shutil.copy(RELU, src)
        env["BT_SOURCE"] = str(src)
        for step in ("inline", "torch_route", "first"):
            env["CUDA_COURSE_BUILD"] = str(Path(tmp) / f"build-{step}")
            print(f"build_times: {step} ...", file=sys.stderr, flush=True)
            res[step] = _child(step, backend, env)
        env["CUDA_COURSE_BUILD"] = str(Path(tmp) / "build-first")  # warm: the runtime object and relu.cu
        print("build_times: reload ...", file=sys.stderr, flush=True)
        res["reload"] = _child("reload", backend, env)
    text = report(machine, res)
    print(text, end="")
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.with_suffix(".json").write_text(json.dumps({"machine": machine, "steps": res}, indent=1) + "\n")


if __name__ == "__main__":
    main()
