"""Sample every process's CPU time once a second while a grade runs, by category (benchmarks/grade_profile.sh).

    python benchmarks/grade_cpu_sampler.py OUT      (stops when /tmp/stop-sampler exists)

Each line of OUT: seconds since the start, then the CPU seconds each category used in that second (16 = every
core of a 16-core machine busy); the last line: the totals. A category is read from the process's command line
(nvcc's stages, g++, the GPU worker, a pytest task process, ...). Processes in PID namespaces are visible in /proc
and counted; the CPU of a process that lived less than a second between samples is missed.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time

CATEGORIES = (("cicc", "nvcc"), ("ptxas", "nvcc"), ("cudafe", "nvcc"), ("nvcc", "nvcc"), ("cc1plus", "g++"),
              ("/g++", "g++"), ("workers/gpu_serve", "gpu_worker"), ("workers/torch_serve", "torch_worker"),
              ("-m pytest", "pytest"), ("grading.build_worker", "warmup"), ("cudacourse grade", "grader"),
              ("triton", "triton"), ("ld ", "ld"), ("python", "python-other"))


def category(pid: str) -> str | None:
    """The category of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if not cmd:
        return "kernel"
    return next((name for key, name in CATEGORIES if key in cmd), cmd.split()[0][-20:])


def main(out_path: str) -> None:
    """Sample until /tmp/stop-sampler exists; write per-second and total CPU seconds by category."""
    hz = os.sysconf("SC_CLK_TCK")
    prev: dict[tuple[str, str], list] = {}
    total: collections.Counter[str] = collections.Counter()
    t0, first = time.time(), True
    with open(out_path, "w") as out:
        while True:
            now, per = {}, collections.Counter()
            for d in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{d}/stat") as f:
                        stat = f.read()
                    parts = stat[stat.rfind(")") + 2:].split()
                    cpu = (int(parts[11]) + int(parts[12])) / hz
                except (OSError, IndexError, ValueError):
                    continue
                key = (d, parts[19])  # pid and start time: a reused pid is another process
                c = prev.get(key) or [category(d), cpu if first else 0.0]  # (what ran before the start: not ours)
                delta, c[1] = cpu - c[1], cpu
                now[key] = c
                if c[0] and delta > 0:
                    per[c[0]] += delta
            prev, first = now, False
            total.update(per)
            out.write(f"{time.time() - t0:6.1f} " + json.dumps({k: round(v, 2) for k, v in per.most_common(8)}) + "\n")
            out.flush()
            if os.path.exists("/tmp/stop-sampler"):
                break
            time.sleep(1.0)
        out.write("TOTAL " + json.dumps({k: round(v, 1) for k, v in total.most_common()}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
