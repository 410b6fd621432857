"""Where a run's CPU went, from Linux process accounting: every process that ended, grouped.

``--cpu-durations`` (tests/conftest.py) counts a test's own CPU and its reaped children's; a sandboxed worker's
processes that the kernel kills with its PID namespace are reaped elsewhere, and the xdist workers' start-up
belongs to no test. Process accounting counts every process that exits. Usage (as root, the psacct/acct package)::

    touch /tmp/pacct && accton /tmp/pacct
    make test                      # (or any command)
    accton off
    python benchmarks/acct_summary.py /tmp/pacct

Prints the CPU seconds by command name, Python processes by size (a process that imports torch costs 2-4 CPU-s on
the 2-core machine), and the largest processes with the chain of their parents (``name(CPU-s, wall s)``).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

BUCKETS = (0.1, 0.5, 2.0, 6.0, 15.0)  # CPU-s bounds of the Python process sizes


@dataclass
class Proc:
    comm: str
    cpu: float  # user + system CPU seconds
    wall: float
    ppid: int


def read(pacct: Path) -> dict[int, Proc]:
    """The processes of ``pacct`` by PID (``dump-acct``'s fields: comm|v3|utime|stime|etime|uid|gid|mem|io|pid|ppid,
    times in 1/100 s; a PID used twice keeps its last process)."""
    out = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True, check=True).stdout
    procs = {}
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) > 10 and f[9].isdigit():
            procs[int(f[9])] = Proc(f[0], (float(f[2]) + float(f[3])) / 100, float(f[4]) / 100, int(f[10]))
    return procs


def chain(procs: dict[int, Proc], pid: int, depth: int = 6) -> str:
    """``pid``'s parents, nearest first."""
    parts = []
    p = procs[pid].ppid
    for _ in range(depth):
        if p not in procs:
            break
        parts.append(f"{procs[p].comm}({procs[p].cpu:.1f}, {procs[p].wall:.0f} s)")
        p = procs[p].ppid
    return " <- ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pacct", type=Path)
    ap.add_argument("--top", type=int, default=25, help="how many of the largest processes to list")
    args = ap.parse_args()
    if not args.pacct.is_file():
        ap.error(f"{args.pacct}: no such file (start accounting into it first: touch it, then `accton {args.pacct}`)")
    if shutil.which("dump-acct") is None:
        ap.error("dump-acct is not installed (Debian/Ubuntu: apt-get install acct)")
    procs = read(args.pacct)
    if not procs:
        ap.error(f"{args.pacct}: no process records (was accounting on while the command ran?)")
    total = sum(p.cpu for p in procs.values())
    by_comm: dict[str, list[float]] = defaultdict(list)
    for p in procs.values():
        by_comm[p.comm].append(p.cpu)
    print(f"{len(procs)} processes, {total:.0f} CPU-s\n\n| command | processes | CPU-s |\n|---|---:|---:|")
    for comm, cpus in sorted(by_comm.items(), key=lambda kv: -sum(kv[1]))[:12]:
        print(f"| {comm} | {len(cpus)} | {sum(cpus):.0f} |")
    print("\nPython processes by size:\n\n| CPU-s each | processes | CPU-s |\n|---|---:|---:|")
    bounds = (0.0, *BUCKETS, float("inf"))
    for lo, hi in itertools.pairwise(bounds):
        sizes = [c for c in by_comm.get("python", []) if lo <= c < hi]
        print(f"| {lo:g}-{hi:g} | {len(sizes)} | {sum(sizes):.0f} |")
    print(f"\nThe {args.top} largest processes (CPU-s, wall s, command, parents):\n")
    for pid, p in sorted(procs.items(), key=lambda kv: -kv[1].cpu)[:args.top]:
        print(f"{p.cpu:7.1f} {p.wall:7.1f}  {p.comm:10s} {chain(procs, pid)}")


if __name__ == "__main__":
    main()
