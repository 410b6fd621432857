"""The simulator's profiler against Nsight Compute, on the lesson 01-03 solution kernels at a fixed small size.

    .venv/bin/python benchmarks/profile_vs_ncu.py              (GPU machine with ncu on the PATH)
    .venv/bin/python benchmarks/profile_vs_ncu.py --from-json results/nvidia-h100-80gb-hbm3/profile_vs_ncu.json
                                                                (any machine: the table again from saved numbers)
    .venv/bin/python benchmarks/profile_vs_ncu.py --speed      (any machine: profile mode vs checked mode)

Default mode: runs every case below once on the simulator with ``profile=True`` (the counters), then
runs this script again under ``ncu --metrics <list> --csv`` on the cuda backend (``--run-cuda``: each case
launched once on the GPU), saves both sides' numbers with the machine, date and command as
``profile_vs_ncu.json`` and writes a markdown table to ``profile_vs_ncu.md``, both in ``$OUT`` (when set)
and ``results/<gpu>/``. ``--from-json FILE`` renders the markdown again from such a json, without a GPU.

The table has two parts:

1. **Access-pattern counts**, which the simulator knows from the source: global requests and sectors,
   shared-memory wavefronts where nvcc kept the source's access width, bank conflicts. Rule (issue 20):
   equal for deterministic access patterns (every case here), within 5% for a kernel in ``TOLERANT``.
   A pair that breaks it is a disagreement, and the script exits with status 1.
2. **Counts that follow nvcc's code generation**: issued shared-memory instructions
   (``smsp__inst_executed_op_shared_*``: a GPU counts every warp that issues one, predicated-off lanes and
   all, at the width nvcc chose) and wavefronts of accesses nvcc widened (``WIDTH_CHANGED``). Listed with
   the reason for each row, never left out; they do not count against the rule.

``--speed``: wall time of each case's launcher in checked mode and in profile mode on the CPU, at the
graded sizes (median of 3 calls after a warm-up), and their ratio (the issue asks for at most 3x);
written to ``$OUT/profile_speed.txt`` and ``results/cpu/profile_speed.txt``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import cudacourse as cc  # noqa: E402
from cudacourse.profile import NCU_LIST, PROFILE_MAX_THREADS  # noqa: E402

SOL = ROOT / "solutions"

# (lesson file, launcher, kernel name, size args) at the comparison size; sizes are the launcher's int args.
CASES = [
    ("01_relu/relu.cu", "relu_v1_scalar", "relu_v1_scalar_kernel", (1 << 16,)),
    ("01_relu/relu.cu", "relu_v2_grid_stride", "relu_v2_grid_stride_kernel", (1 << 16, 32)),
    ("01_relu/relu.cu", "relu_v3_float4", "relu_v3_float4_kernel", (1 << 16,)),
    ("02_reduce/reduce.cu", "reduce_v1_interleaved", "reduce_v1_interleaved_kernel", (1 << 14,)),
    ("02_reduce/reduce.cu", "reduce_v1b_strided_index", "reduce_v1b_strided_index_kernel", (1 << 14,)),
    ("02_reduce/reduce.cu", "reduce_v2_sequential", "reduce_v2_sequential_kernel", (1 << 14,)),
    ("02_reduce/reduce.cu", "reduce_v5_warp_shuffle", "reduce_v5_warp_shuffle_kernel", (1 << 14,)),
    ("03_gemm/gemm.cu", "sgemm_v1_naive", "sgemm_v1_naive_kernel", (128, 128, 128)),
    ("03_gemm/gemm.cu", "sgemm_v2_coalesced", "sgemm_v2_coalesced_kernel", (128, 128, 128)),
    ("03_gemm/gemm.cu", "sgemm_v3_shared", "sgemm_v3_shared_kernel", (128, 128, 128)),
    ("03_gemm/transpose.cu", "transpose_naive", "transpose_naive_kernel", (256, 256)),
    ("03_gemm/transpose.cu", "transpose_tiled", "transpose_tiled_kernel", (256, 256)),
    ("03_gemm/transpose.cu", "transpose_conflict_free", "transpose_conflict_free_kernel", (256, 256)),
]
# graded sizes for the speed comparison (the largest simulator case of each lesson's tests)
SPEED_SIZES = {"01_relu": (2**20 + 3, 64), "02_reduce": (2**20 + 7,), "03_gemm/gemm.cu": (70, 150, 257),
               "03_gemm/transpose.cu": (64, 96)}

# --- how each (kernel, metric) pair is judged -------------------------------------------------------------
ACCESS, CODEGEN = "access", "codegen"
# issued warp instructions: what nvcc emitted and warps issued, predicated-off lanes included
ISSUED = ("smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum")
# kernels whose access pattern depends on timing or data (atomics racing, data-dependent indices): within 5%
# instead of equal. None of the cases above is such a kernel.
TOLERANT: dict[str, str] = {}
TOLERANCE = 0.05

# Why a code-generation count is what it is. Read in the SASS of the solution files built as the cuda backend
# builds them (nvcc 13.0 -O3 -lineinfo -arch=sm_90a -cubin, then cuobjdump -sass), at the sizes of CASES.
NOTES: dict[str, str] = {
    "issued": "Issued warp instructions depend on nvcc's code: equal here because nvcc emitted one instruction "
              "per source access at the source's width and no warp issued one with every lane predicated off.",
    "predicated": "nvcc predicates the tree step `if (...) s_data[a] += s_data[b];` instead of branching around "
                  "it (SASS: `@!P1 LDS`, `@!P1 LDS`, `@!P1 STS` inside the loop), so every warp issues both loads "
                  "and the store at each of the 8 steps, whether or not a lane's condition holds, and "
                  "`smsp__inst_executed` counts issued instructions, predicated-off ones included: loads 64 blocks "
                  "x 8 warps x 8 steps x 2 + 64 (thread 0's final read) = 8,256, stores 64 x 8 x (1 + 8) = 4,608, "
                  "for all three versions. The simulator counts a warp's instruction only where one of its lanes "
                  "executes it. Predicated-off instructions move no data: the wavefronts in part 1 agree.",
    "lds128": "nvcc merges the unrolled inner loop's reads `As[ty][k]` .. `As[ty][k+3]` into one 128-bit LDS.128 "
              "and keeps the 32 `Bs[k][tx]` reads as 32-bit LDS: 40 load instructions per 32x32 tile instead of "
              "the source's 64. 16 blocks x 32 warps x 4 tiles = 2,048 warp-tiles: 2,048 x 40 = 81,920 on the GPU, "
              "2,048 x 64 = 131,072 counted by the simulator at the source's width.",
    "lds128_wavefronts": "The same LDS.128 reads, each one 16-byte word broadcast to the warp (all lanes share ty): "
                         "the H100's total means 2 wavefronts for each (2,048 x (32 LDS x 1 + 8 LDS.128 x 2) = "
                         "98,304; the 32-bit reads of 32 consecutive words take 1 and no load had a conflict); "
                         "the simulator counts the source's 64 32-bit reads, one wavefront each. Had the source "
                         "itself read a float4 here, the simulator's quarter-warp rule would count 4 wavefronts "
                         "for each such broadcast, not 2.",
}
# the note for an issued-instruction row: (kernel, metric) -> key in NOTES (default "issued")
_LD, _ST = ISSUED
ISSUED_NOTES: dict[tuple[str, str], str] = {
    **{(k, m): "predicated" for k in ("reduce_v1_interleaved_kernel", "reduce_v1b_strided_index_kernel",
                                      "reduce_v2_sequential_kernel") for m in ISSUED},
    ("sgemm_v3_shared_kernel", _LD): "lds128",
}
# wavefront counts that follow the access width nvcc picked rather than the source's: (kernel, metric) -> note
WIDTH_CHANGED: dict[tuple[str, str], str] = {
    ("sgemm_v3_shared_kernel", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"): "lds128_wavefronts",
}


def _args(la, sizes: tuple, device: str) -> list:
    """Random tensors large enough for every pointer parameter, then the sizes for the int parameters."""
    n = 1
    for s in sizes:
        n = max(n, s)
    numel = max(sizes[0] * (sizes[1] if len(sizes) > 1 else 1), n * n if len(sizes) == 3 else 0) + 64
    g = torch.Generator().manual_seed(0)
    out, ints = [], list(sizes)
    for p in la.params:
        if p.pointer:
            dt = getattr(torch, p.dtype) if p.dtype not in (None, "any") else torch.float32
            t = torch.randn(numel, generator=g).to(dt) if dt.is_floating_point else torch.zeros(numel, dtype=dt)
            out.append(t.to(device))
        else:
            out.append(ints.pop(0) if ints else 1.0)
    return out


def run_sim() -> dict:
    """The simulator's counters of every case: {kernel: {metric: value}}."""
    res: dict = {}
    for file, fn, kernel, sizes in CASES:
        m = cc.load(SOL / file, [fn], backend="sim", profile=True)
        getattr(m, fn)(*_args(m.launchers[fn], sizes, "cpu"))
        k = m.profile_report().kernel(kernel)
        res[kernel] = {name: k.metrics[name] for name in NCU_LIST}
        m.close()
    return res


def run_cuda() -> None:
    """Each case once on the GPU (the process ncu profiles)."""
    for file, fn, _kernel, sizes in CASES:
        m = cc.load(SOL / file, [fn], backend="cuda")
        getattr(m, fn)(*_args(m.launchers[fn], sizes, "cuda"))
        torch.cuda.synchronize()


def run_ncu() -> dict:
    """Run ``--run-cuda`` under Nsight Compute; {kernel: {metric: value}} of the first launch of each case."""
    ncu = shutil.which("ncu")
    if not ncu:
        raise SystemExit("ncu is not on the PATH (Nsight Compute ships with the CUDA toolkit)")
    kernels = "|".join(k for _f, _fn, k, _s in CASES)
    cmd = [ncu, "--metrics", ",".join(NCU_LIST), "--csv", "--print-units", "base", "--target-processes", "all",
           "-k", f"regex:^({kernels})$",
           sys.executable, __file__, "--run-cuda"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    text = r.stdout[r.stdout.find('"ID"'):] if '"ID"' in r.stdout else ""
    if not text:
        raise SystemExit(f"ncu gave no CSV (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    res: dict = {}
    seen: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(text)):
        name = row["Kernel Name"].split("(")[0].split("<")[0].strip().split(" ")[-1]
        launch = row["ID"]
        if seen.setdefault(name, launch) != launch:
            continue  # a later launch of the same kernel
        val = row["Metric Value"].replace(",", "")
        try:
            res.setdefault(name, {})[row["Metric Name"]] = float(val)
        except ValueError:
            pass
    return res


def classify(kernel: str, metric: str) -> tuple[str, str]:
    """(part, note key) of one pair: ``ACCESS`` with no note, or ``CODEGEN`` with the key of its reason in NOTES."""
    if metric in ISSUED or "inst_executed" in metric:
        return CODEGEN, ISSUED_NOTES.get((kernel, metric), "issued")
    if (kernel, metric) in WIDTH_CHANGED:
        return CODEGEN, WIDTH_CHANGED[(kernel, metric)]
    return ACCESS, ""


def _space(metric: str) -> str:
    """The memory space a metric counts: 'global atomics', 'shared memory' or 'global memory'."""
    return "global atomics" if "_op_atom" in metric else "shared memory" if "shared" in metric else "global memory"


@dataclass
class Pair:
    """One compared value: the simulator's and Nsight Compute's count of one metric for one kernel."""

    kernel: str
    metric: str
    part: str              # ACCESS or CODEGEN
    note: str              # key into NOTES (CODEGEN pairs)
    sim: float | None
    ncu: float | None
    ok: bool               # ACCESS: meets the rule; CODEGEN: the two are equal

    @property
    def missing(self) -> bool:
        """One side has no number for this pair."""
        return self.sim is None or self.ncu is None


def compare(sim: dict, gpu: dict) -> tuple[list[Pair], dict[str, list[str]]]:
    """Every (kernel, metric) pair of the two sides, classified and judged, in CASES order (other kernels after).

    A pair that is 0 on both sides is kept where the kernel uses that memory space (a bank-conflict count of 0
    in a kernel with shared accesses is a result) and otherwise left out; the second value lists, per kernel,
    the memory spaces left out that way."""
    for name, side in (("sim", sim), ("ncu", gpu)):
        if not isinstance(side, dict) or not all(isinstance(v, dict) for v in side.values()):
            raise ValueError(f"'{name}' must map kernel names to {{metric: number}}; got {type(side).__name__}")
    kernels = [k for _f, _fn, k, _s in CASES if k in sim or k in gpu]
    kernels += [k for k in list(sim) + list(gpu) if k not in kernels]
    pairs: list[Pair] = []
    unused: dict[str, list[str]] = {}
    for kernel in dict.fromkeys(kernels):
        s_k, g_k = sim.get(kernel, {}), gpu.get(kernel, {})
        metrics = list(dict.fromkeys([*NCU_LIST, *sorted(set(s_k) | set(g_k))]))
        used = {_space(m) for m in metrics if s_k.get(m) or g_k.get(m)}
        for metric in metrics:
            s, g = s_k.get(metric), g_k.get(metric)
            if s is None and g is None:
                continue
            if not s and not g and s is not None and g is not None and _space(metric) not in used:
                if _space(metric) not in unused.setdefault(kernel, []):
                    unused[kernel].append(_space(metric))
                continue
            part, note = classify(kernel, metric)
            if s is None or g is None:
                ok = False
            elif part == ACCESS and kernel in TOLERANT:
                ok = abs(s - g) <= TOLERANCE * max(abs(g), 1e-9)
            else:
                ok = s == g
            pairs.append(Pair(kernel, metric, part, note, s, g, ok))
    return pairs, unused


def _num(v: float | None) -> str:
    return "not measured" if v is None else f"{v:,.0f}"


def table(data: dict) -> str:
    """The markdown report of one comparison: ``data`` is the saved json ({"sim", "ncu"} and, when recorded,
    "device", "date", "command", "nvcc", "ncu_version", "cases")."""
    for key in ("sim", "ncu"):
        if key not in data:
            raise ValueError(f"the comparison has no '{key}' numbers (keys found: {sorted(data)}); it must be "
                             "the profile_vs_ncu.json this script writes")
    pairs, unused = compare(data["sim"], data["ncu"])
    device = data.get("device") or "an unnamed GPU"
    access = [p for p in pairs if p.part == ACCESS]
    codegen = [p for p in pairs if p.part == CODEGEN]
    a_ok = sum(p.ok for p in access)
    c_eq = sum(p.ok for p in codegen)
    cases = data.get("cases") or [[f, fn, k, list(sz)] for f, fn, k, sz in CASES]
    tools = ", ".join(f"{k} {data[k]}" for k in ("nvcc", "ncu_version") if data.get(k))
    lines = [
        f"# Simulator profiler vs Nsight Compute ({device})", "",
        f"Measured on {device}" + (f" on {data['date']}" if data.get("date") else " (date not recorded)") +
        (f" with `{data['command']}`" if data.get("command") else "") + (f" ({tools})" if tools else "") +
        "; this table is rendered from the numbers of both sides in `profile_vs_ncu.json` beside it by "
        "`.venv/bin/python benchmarks/profile_vs_ncu.py --from-json <that file>`.", "",
        "Each lesson 01-03 solution kernel is launched once on the simulator (`profile=True`) and once on the GPU "
        "under `ncu` (the launchers' int arguments: " + "; ".join(f"{c[2]} {tuple(c[3])}" for c in cases) + ").", "",
        "## Summary", "",
        f"- **Access-pattern counts** (what the simulator knows from the source: global requests and sectors, "
        f"shared-memory wavefronts where nvcc kept the source's access width, bank conflicts): **{a_ok} of "
        f"{len(access)} agree**. Rule: equal for deterministic access patterns"
        + (f"; within {TOLERANCE:.0%} for {', '.join(sorted(TOLERANT))}" if TOLERANT else " (every kernel here)")
        + ".",
        f"- **Counts that follow nvcc's code generation** (issued shared-memory instructions, and wavefronts of "
        f"accesses nvcc widened): {c_eq} of {len(codegen)} equal; each row gives the reason for its value. These "
        f"are not held to the rule: the simulator counts the source's accesses, not the instructions nvcc emits.",
        "", "## 1. Access-pattern counts", "",
        "| metric | kernel | simulator | ncu | agree? |", "|---|---|---:|---:|---|"]
    for p in access:
        verdict = "yes" if p.ok else ("**missing**" if p.missing else "**no**")
        lines.append(f"| `{p.metric}` | {p.kernel} | {_num(p.sim)} | {_num(p.ncu)} | {verdict} |")
    lines += ["", "## 2. Counts that follow nvcc's code generation", "",
              "| metric | kernel | simulator | ncu | equal? | why (note) |", "|---|---|---:|---:|---|---|"]
    used_notes = list(dict.fromkeys(p.note for p in codegen))
    for p in codegen:
        verdict = "yes" if p.ok else ("missing" if p.missing else "differs")
        lines.append(f"| `{p.metric}` | {p.kernel} | {_num(p.sim)} | {_num(p.ncu)} | {verdict} | "
                     f"{used_notes.index(p.note) + 1} |")
    lines += ["", "Notes (from the SASS of the solution files built as the cuda backend builds them, "
              "`nvcc -O3 -lineinfo -arch=sm_90a -cubin` with nvcc 13.0, read with `cuobjdump -sass`):", ""]
    lines += [f"{i + 1}. {NOTES.get(key, key)}" for i, key in enumerate(used_notes)]
    by_space: dict[str, list[str]] = {}
    for kernel, spaces in unused.items():
        for space in spaces:
            by_space.setdefault(space, []).append(kernel)
    n_kernels = len({p.kernel for p in pairs} | set(unused))
    if by_space:
        lines += ["", "Not listed: pairs that are 0 on both sides in a memory space the kernel does not use ("
                  + "; ".join(f"{space}: {'every kernel' if len(ks) == n_kernels else ', '.join(ks)}"
                              for space, ks in by_space.items()) + ")."]
    return "\n".join(lines) + "\n"


def disagreements(data: dict) -> list[Pair]:
    """The access-pattern pairs that break the rule (missing numbers included)."""
    return [p for p in compare(data["sim"], data["ncu"])[0] if p.part == ACCESS and not p.ok]


def speed() -> str:
    """Checked vs profile mode wall time per case at the graded sizes (CPU)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = [f"Profile mode against checked mode on the CPU simulator: median of 3 calls after a warm-up, graded sizes "
            f"({os.cpu_count()} cores, load average {load:.1f} at the start).",
            f"Launches above {PROFILE_MAX_THREADS} threads count a sample of blocks (the 2^20-element relu_v1, relu_v3 "
            "and reduce launches: every 3rd to 9th block); every block still runs in checked mode.", "",
            "case                         checked ms   profile ms   ratio"]
    for file, fn, _kernel, _sizes in CASES:
        sizes = SPEED_SIZES.get(file, SPEED_SIZES.get(file.split("/")[0]))
        if fn == "relu_v2_grid_stride":
            sizes = (sizes[0], 64)
        elif file.startswith("01_relu"):
            sizes = sizes[:1]
        times = []
        for profile in (False, True):
            m = cc.load(SOL / file, [fn], backend="sim", profile=profile)
            args = _args(m.launchers[fn], sizes, "cpu")
            f = getattr(m, fn)
            f(*args)  # warm-up: starts the worker
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                f(*args)
                ts.append(time.perf_counter() - t0)
            times.append(statistics.median(ts) * 1e3)
            m.close()
        rows.append(f"{fn:<28} {times[0]:10.1f} {times[1]:12.1f} {times[1] / times[0]:7.2f}x")
    return "\n".join(rows) + "\n"


def _write(name: str, text: str, folder: str) -> None:
    print(text)
    for d in ([Path(os.environ["OUT"])] if os.environ.get("OUT") else []) + [ROOT / "results" / folder]:
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
        print(f"wrote {d / name}")


def _version(tool: str | None) -> str:
    """The last line of ``tool --version`` ('' when it cannot be run)."""
    if not tool:
        return ""
    try:
        r = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return ""
    out = r.stdout.strip().splitlines()
    return out[-1].strip() if out else ""


def load_json(path: str, device: str | None = None, date: str | None = None, command: str | None = None) -> dict:
    """A saved comparison, with ``device``/``date``/``command`` filled in where given (older files did not record
    them)."""
    f = Path(path)
    if not f.is_file():
        raise SystemExit(f"--from-json: no file {f} (give the profile_vs_ncu.json a GPU run wrote, e.g. "
                         "results/nvidia-h100-80gb-hbm3/profile_vs_ncu.json)")
    try:
        data = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"--from-json: {f} is not JSON ({e})") from None
    if not isinstance(data, dict) or "sim" not in data or "ncu" not in data:
        raise SystemExit(f"--from-json: {f} has no 'sim' and 'ncu' numbers: it must be the profile_vs_ncu.json "
                         "this script writes")
    if device:
        data["device"] = device
    if date:
        data["date"] = date
    if command:
        data["command"] = command
    if not data.get("device"):
        raise SystemExit(f"--from-json: {f} does not name its GPU (written before the script recorded it): "
                         "add --device 'NVIDIA H100 80GB HBM3' (the name torch.cuda.get_device_name() gave)")
    return data


def main() -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-cuda", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--speed", action="store_true", help="profile vs checked mode wall time on the CPU")
    ap.add_argument("--sim-only", action="store_true", help="print the simulator's counters as JSON and stop")
    ap.add_argument("--from-json", metavar="FILE", help="render the table again from a saved profile_vs_ncu.json")
    ap.add_argument("--device", help="with --from-json: the GPU's name, for a file that does not record it")
    ap.add_argument("--date", help="with --from-json: the date of the measurement (YYYY-MM-DD), for a file "
                                   "that does not record it")
    ap.add_argument("--command", help="with --from-json: the command that measured it, for a file that does not "
                                      "record it")
    a = ap.parse_args()
    given = a.device or a.date or a.command
    if given and not a.from_json:
        ap.error("--device, --date and --command go with --from-json (a GPU run records its own)")
    if a.run_cuda:
        run_cuda()
        return 0
    if a.speed:
        _write("profile_speed.txt", speed(), "cpu")
        return 0
    from cudacourse import bench

    if a.from_json:
        data = load_json(a.from_json, a.device, a.date, a.command)
    else:
        sim = run_sim()
        if a.sim_only:
            print(json.dumps(sim, indent=1))
            return 0
        from cudacourse.loader import nvcc_path

        gpu = run_ncu()
        data = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
                "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
                "nvcc": _version(nvcc_path()), "ncu_version": _version(shutil.which("ncu")),
                "cases": [[f, fn, k, list(sz)] for f, fn, k, sz in CASES], "sim": sim, "ncu": gpu}
    folder = bench.slug(data["device"])
    saved = ROOT / "results" / folder / "profile_vs_ncu.json"
    if not (a.from_json and saved.exists() and Path(a.from_json).resolve() == saved.resolve()
            and not given):
        _write_quiet("profile_vs_ncu.json", json.dumps(data, indent=1) + "\n", folder)
    _write("profile_vs_ncu.md", table(data), folder)
    bad = disagreements(data)
    for p in bad:
        print(f"DISAGREES: {p.metric} of {p.kernel}: simulator {_num(p.sim)}, ncu {_num(p.ncu)}", file=sys.stderr)
    return 1 if bad else 0


def _write_quiet(name: str, text: str, folder: str) -> None:
    """Like _write, without printing the text (the raw numbers)."""
    for d in ([Path(os.environ["OUT"])] if os.environ.get("OUT") else []) + [ROOT / "results" / folder]:
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
        print(f"wrote {d / name}")


if __name__ == "__main__":
    sys.exit(main())
