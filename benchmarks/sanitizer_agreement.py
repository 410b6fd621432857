"""Does the simulator's diagnosis agree with NVIDIA compute-sanitizer on every bug of tests/bug_corpus?

Run on a GPU machine with nvcc and compute-sanitizer on the PATH (CUDA 12 or 13), from the repository root:

    OUT=/tmp/out .venv/bin/python benchmarks/sanitizer_agreement.py [--jobs 16] [--arch sm_90]

For every corpus file it (1) runs the file on the CPU simulator in checked mode (the same runner as
tests/sim/test_bug_corpus.py) and records the error class raised; (2) builds the file with nvcc together with
a small generated main() (inputs from cudaMemcpy, the output poisoned with cudaMemset 0xFF, as the course's
harness does) and runs it under each compute-sanitizer tool (memcheck, racecheck, initcheck, synccheck);
(3) writes ``$OUT/sanitizer_agreement.md`` (bug, simulator's verdict, relevant tool, its verdict, agree?)
and ``$OUT/sanitizer_agreement.json`` (every tool's error count and output tail). Builds and sanitizer runs
go in parallel (--jobs); each sanitizer run is stopped after --timeout seconds (the spin-wait case hangs on
a GPU too). ``--sim-only`` skips the GPU part (a check that the simulator side works on a CPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sim"))

from corpus import CORPUS, load_case, run_case  # noqa: E402

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

# The compute-sanitizer tool that covers each simulator diagnosis.
RELEVANT = {
    "RaceError": "racecheck",
    "OutOfBoundsError": "memcheck",
    "UninitializedReadError": "initcheck",
    "BarrierError": "synccheck",
    "KernelError": "memcheck",
    "LaunchError": "memcheck",
    "KernelTimeout": "memcheck",
    "poison": "memcheck",
}

# Bugs compute-sanitizer cannot see by design, and why (checked against its documentation).
BLIND = {
    "global_race_blocks": "racecheck checks shared memory only; races on global memory are not in its scope",
    "global_inplace_shift": "racecheck checks shared memory only; races on global memory are not in its scope",
    "uninit_shared": "initcheck checks global memory only; uninitialised shared-memory reads are not in its scope",
    "spin_wait": "a spin-wait on another block's flag hangs on a GPU too; no tool reports a hang",
    "off_by_one_silent": "no invalid access happens (the last element is simply not written); nothing to report",
    "shfl_outside_mask": "a shuffle from a lane outside the mask returns an undefined value without a fault; "
                         "synccheck checks barrier and mask participation, not the source lane",
    "volatile_warp_reduce": "racecheck may not report warp-synchronous hazards between lanes of one warp",
    # Measured on an H100 (sm_90): synccheck stays silent on these, the hardware tolerates them; the CUDA
    # Programming Guide still calls them undefined, and the simulator applies the guide's rule.
    "early_return_barrier": "synccheck reported nothing on sm_90 (the barrier does not wait for exited threads); "
                            "the Programming Guide allows __syncthreads in conditional code only when the "
                            "condition is the same for the whole block",
    "shfl_in_if": "synccheck reported nothing on sm_90; the Programming Guide leaves a _sync collective "
                  "undefined when a lane named in its mask does not execute it",
}

MAIN = r"""
#include <cstdio>
#include <cstdlib>
#include <vector>
int main() {
    const int n_in = %(in)d, n_out = %(out)d, n = %(n)d;
    std::vector<float> h(n_in);
    unsigned s = 12345u;
    for (auto& v : h) { s = s * 1664525u + 1013904223u; v = (float)(s >> 8) / 16777216.0f - 0.5f; }
    float *in = nullptr, *out = nullptr;
    cudaMalloc(&in, n_in * sizeof(float));
    cudaMalloc(&out, n_out * sizeof(float));
    cudaMemcpy(in, h.data(), n_in * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(out, 0xFF, n_out * sizeof(float));     // poison, as the course's harness does
    run(in, out, n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGetLastError();
    std::vector<float> r(n_out);
    cudaMemcpy(r.data(), out, n_out * sizeof(float), cudaMemcpyDeviceToHost);
    printf("status %%s\n", cudaGetErrorName(e));
    cudaFree(in); cudaFree(out);
    return e == cudaSuccess ? 0 : 3;
}
"""


def sim_verdict(path: Path) -> str:
    """The error class the simulator raises on this corpus file (checked mode), or 'no error'."""
    case = load_case(path)
    err, _ = run_case(case, timeout_s=5.0)
    return type(err).__name__ if err is not None else "no error"


def build(path: Path, work: Path, arch: str) -> tuple[Path | None, str]:
    """nvcc the corpus file with a generated main(); (binary, compiler output)."""
    case = load_case(path)
    src = work / f"{path.stem}_main.cu"
    src.write_text(path.read_text() + MAIN % case.sizes)
    exe = work / path.stem
    r = subprocess.run(["nvcc", "-lineinfo", f"-arch={arch}", "-o", str(exe), str(src)], capture_output=True,
                       text=True)
    return (exe if r.returncode == 0 else None), (r.stdout + r.stderr)[-3000:]


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazard")


def sanitize(exe: Path, tool: str, timeout: float) -> dict:
    """One compute-sanitizer run: error count (None on a hang), exit code, output tail."""
    cmd = ["compute-sanitizer", f"--tool={tool}", "--print-limit=20"]
    if tool == "racecheck":
        cmd += ["--racecheck-report=all"]
    t = time.monotonic()
    # its own session: a hanging kernel is stopped with the whole process group (the sanitizer's target
    # process included), so nothing keeps the GPU busy for the runs that follow
    p = subprocess.Popen([*cmd, str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return {"errors": None, "hang": True, "rc": None, "seconds": round(time.monotonic() - t, 1),
                "tail": (out or "")[-1500:]}
    r = subprocess.CompletedProcess(p.args, p.returncode)
    m = _SUMMARY.search(out)
    errors = int(m.group(1)) if m else None
    hz = _RACE_SUMMARY.search(out)
    return {"errors": errors, "hazards": int(hz.group(1)) if hz else None, "hang": False, "rc": r.returncode,
            "seconds": round(time.monotonic() - t, 1), "tail": out[-1500:]}


def main() -> None:
    """Run the comparison and write the table and the JSON under $OUT."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--from-json", type=Path, help="re-render the table from a saved sanitizer_agreement.json")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT") or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = sorted(CORPUS.glob("*.cu"))
    t0 = time.monotonic()

    saved = json.loads(args.from_json.read_text()) if args.from_json else None
    if saved:  # re-render only: the simulator and GPU results come from the saved run
        results: dict[str, dict] = saved["cases"]
    else:
        results = {p.stem: {"expect": load_case(p).expect} for p in cases}
        with ThreadPoolExecutor(max_workers=min(4, args.jobs)) as pool:  # simulator builds are CPU-heavy
            for p, v in zip(cases, pool.map(sim_verdict, cases), strict=True):
                results[p.stem]["sim"] = v

    if not args.sim_only and not saved:
        if not shutil.which("nvcc") or not shutil.which("compute-sanitizer"):
            sys.exit("nvcc and compute-sanitizer must be on the PATH (or pass --sim-only)")
        work = Path(tempfile.mkdtemp(prefix="sanitizer-agreement-"))
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            built = dict(zip([p.stem for p in cases], pool.map(lambda p: build(p, work, args.arch), cases),
                             strict=True))
            jobs = {(stem, tool): pool.submit(sanitize, exe, tool, args.timeout)
                    for stem, (exe, _) in built.items() if exe is not None for tool in TOOLS}
            for stem, (exe, log) in built.items():
                results[stem]["nvcc"] = "ok" if exe is not None else "refused: " + log.strip().splitlines()[-1]
                results[stem]["tools"] = {tool: jobs[(stem, tool)].result() for tool in TOOLS
                                          if (stem, tool) in jobs}

    rows = ["| bug | simulator | sanitizer tool | sanitizer | agree? |", "|---|---|---|---|---|"]
    for stem, r in results.items():
        sim_found = r["sim"] not in ("no error",) and r["expect"] != "poison"
        tool = RELEVANT.get(r["expect"], "memcheck")
        if args.sim_only:
            san, agree = "(not run)", ""
        elif not r.get("nvcc", "").startswith("ok"):
            san, agree = f"nvcc {r['nvcc']}", "yes (refused at build time)" if sim_found else "no"
        else:
            res = r["tools"][tool]
            if res["hang"]:
                san = f"hang (stopped after {args.timeout:g} s)"
                found = r["expect"] == "KernelTimeout"
            else:
                # racecheck prints "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)" instead of
                # the other tools' "ERROR SUMMARY: N errors"
                count = res["errors"] if res["errors"] is not None else res.get("hazards")
                what = "error(s)" if res["errors"] is not None else "hazard(s)"
                san = f"{count} {what}" if count is not None else f"no summary (rc {res['rc']})"
                found = bool(count)
            if found == sim_found:
                agree = "yes"
            elif sim_found and stem in BLIND:
                agree = "no; the sanitizer cannot see it: " + BLIND[stem]
            else:
                agree = "**no**"
            r["agree"] = agree
        rows.append(f"| {stem} | {r['sim']} (expected {r['expect']}) | {tool} | {san} | {agree} |")
    elapsed = saved["seconds"] if saved else time.monotonic() - t0
    md = ("# Simulator vs compute-sanitizer on tests/bug_corpus\n\n" + "\n".join(rows) +
          f"\n\n{len(results)} bugs; {elapsed:.0f} s. Relevant tool per simulator error class: "
          + ", ".join(f"{k} -> {v}" for k, v in RELEVANT.items()) + ".\n")
    (out_dir / "sanitizer_agreement.md").write_text(md)
    (out_dir / "sanitizer_agreement.json").write_text(json.dumps({"seconds": elapsed, "cases": results}, indent=1))
    print(md)


if __name__ == "__main__":
    main()
