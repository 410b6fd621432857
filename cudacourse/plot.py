"""Charts for benchmark results and access pictures from the simulator's profile (matplotlib, headless-safe)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def versions_chart(names: Sequence[str], values: Sequence[float], *, ylabel: str, title: str,
                   ceiling: float | None = None, ceiling_label: str = "", path: str | Path | None = None) -> Any:
    """Bar chart of one figure per version (GB/s or TFLOP/s), with an optional ceiling line."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names) + 2), 3.6))
    ax.bar(range(len(names)), values, color="#4C72B0")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    if ceiling:
        ax.axhline(ceiling, color="#C44E52", ls="--", lw=1)
        ax.text(len(names) - 0.5, ceiling, f" {ceiling_label}", va="bottom", ha="right", fontsize=8, color="#C44E52")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig


def bandwidth_vs_size(sizes: Sequence[int], series: dict[str, Sequence[float]], *, copy_gbs: float | None = None,
                      title: str = "bandwidth vs size", path: str | Path | None = None) -> Any:
    """Achieved GB/s against problem size (elements, log scale), one line per version."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, ys in series.items():
        ax.plot(sizes, ys, marker="o", ms=3, label=name)
    if copy_gbs:
        ax.axhline(copy_gbs, color="#C44E52", ls="--", lw=1, label="copy bandwidth (measured)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("elements")
    ax.set_ylabel("GB/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig


def results_charts(rows: Sequence[Any], copy_gbs: float, out: Path) -> list[Path]:
    """One chart per benchmark group: GB/s (memory-bound rows) or TFLOP/s (compute-bound rows)."""
    made = []
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        groups.setdefault((r.lesson, r.group), []).append(r)
    for (lesson, group), rs in groups.items():
        rs = [r for r in rs if r.ms == r.ms]
        if not rs:
            continue
        use_tflops = all(r.tflops for r in rs)
        vals = [r.tflops if use_tflops else (r.gbs or 0.0) for r in rs]
        name = f"{lesson}_{''.join(c if c.isalnum() else '_' for c in group)}.png"[:100]
        versions_chart([r.name for r in rs], vals, ylabel="TFLOP/s" if use_tflops else "GB/s",
                       title=f"{lesson}: {group}", ceiling=None if use_tflops else copy_gbs,
                       ceiling_label="copy bandwidth", path=out / name)
        made.append(out / name)
    return made


# ----------------------------------------------------------------------------------------------------
# Access pictures from the simulator's profile (cc.load(..., profile=True); small launches)
# ----------------------------------------------------------------------------------------------------


def _trace(kp: Any, buffer: str, op: str | None, line: int | None) -> list[tuple]:
    rows = [t for t in kp.trace if t[3] == buffer and (op is None or t[1] == op) and (line is None or t[7] == line)]
    if not rows:
        have = sorted({(t[3], t[1], t[7]) for t in kp.trace})
        raise ValueError(f"no recorded {op or 'access'} of {buffer!r}{f' at line {line}' if line else ''} in "
                         f"{kp.kernel} (recorded: {', '.join(f'{b} {o} line {ln}' for b, o, ln in have) or 'none'})")
    return rows


def _element_size(rows: Sequence[tuple]) -> int:
    """Bytes per element of a traced buffer, from its accesses' ``(element, byte offset)`` pairs.

    The simulator records ``element = offset // element size``; an aligned access (the usual case) gives the
    size exactly as ``offset // element``, so the most common such value wins. A buffer whose accesses all start
    at element 0 gives no evidence: its smallest access size is taken (one element per access at worst).
    """
    from collections import Counter

    sizes = Counter(int(off) // int(elem) for *_, elem, _ln, off in rows if int(elem) > 0 and int(off) % int(elem) == 0)
    return sizes.most_common(1)[0][0] if sizes else max(1, min(int(r[2]) for r in rows))


def access_map(kp: Any, buffer: str, *, shape: tuple[int, int] | None = None, op: str | None = None,
               line: int | None = None, by: str = "warp", title: str | None = None,
               path: str | Path | None = None) -> Any:
    """Which warp (``by="warp"``) or thread (``by="thread"``) first touches each element of ``buffer``.

    ``kp`` is a ``KernelProfile`` (``m.profile_report().kernel(name)``); ``shape`` lays the elements out as
    rows x columns (default: one row of up to 64 per row). Every element an access covers is coloured (a
    16-byte ``float4`` load colours its four floats, not only the first); untouched elements stay white. The
    colour bar has one colour per warp (or thread) drawn, labelled with its number.
    """
    import numpy as np
    from matplotlib.colors import BoundaryNorm, ListedColormap

    plt = _plt()
    rows = _trace(kp, buffer, op, line)
    tpb = kp.threads_per_block
    esize = _element_size(rows)
    first: dict[int, int] = {}
    for _space, _op, size, _buf, block, tid, _elem, _ln, off in rows:
        who = block * tpb + tid if by == "thread" else (block * tpb + tid) // 32 if by == "warp" else block
        for e in range(int(off) // esize, (int(off) + max(int(size), 1) - 1) // esize + 1):
            first.setdefault(e, who)
    n = max(first) + 1
    if shape is None:
        cols = min(64, n)
        shape = (math.ceil(n / cols), cols)
    drawn = sorted({who for e, who in first.items() if e < shape[0] * shape[1]})
    index = {who: i for i, who in enumerate(drawn)}
    grid = np.full(shape[0] * shape[1], np.nan)
    for e, who in first.items():
        if e < grid.size:
            grid[e] = index[who]
    k = max(1, len(drawn))
    base = plt.get_cmap("tab10" if k <= 10 else "tab20" if k <= 20 else "viridis")
    colours = base.colors[:k] if hasattr(base, "colors") and k <= 20 else base(np.linspace(0, 1, k))
    cmap, norm = ListedColormap(colours), BoundaryNorm(np.arange(k + 1) - 0.5, k)
    fig, ax = plt.subplots(figsize=(min(12, 0.25 * shape[1] + 2), min(8, 0.25 * shape[0] + 1.5)))
    im = ax.imshow(grid.reshape(shape), cmap=cmap, norm=norm, interpolation="nearest")
    step = max(1, math.ceil(k / 20))  # at most ~20 labels; every colour is still one warp (thread)
    bar = fig.colorbar(im, ax=ax, label=by, shrink=0.8, ticks=list(range(0, k, step)))
    bar.set_ticklabels([str(drawn[i]) for i in range(0, k, step)] if drawn else [])
    ax.set_title(title or f"{kp.kernel}: {buffer} coloured by the {by} that touches it first", fontsize=9)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    fig.tight_layout()
    return _save(fig, plt, path)


def coalescing_map(kp: Any, buffer: str, *, op: str | None = None, line: int | None = None, warp: int = 0,
                   title: str | None = None, path: str | Path | None = None) -> Any:
    """The 32-byte sectors one warp-level request touches: lanes (rows) against sectors (columns).

    Takes the first access of each lane of warp ``warp`` (of block 0) to ``buffer`` at ``line``. Four
    sectors for 32 floats is a coalesced request; 32 sectors is one per lane.
    """
    import numpy as np

    plt = _plt()
    rows = _trace(kp, buffer, op, line)
    tpb = kp.threads_per_block
    first: dict[int, tuple[int, int]] = {}
    for _space, _op, size, _buf, block, tid, _elem, _ln, off in rows:
        if block == 0 and tid // 32 == warp and tid < tpb:
            first.setdefault(tid % 32, (int(off), int(size)))
    if not first:
        raise ValueError(f"warp {warp} of block 0 does not access {buffer!r} in the recorded trace")
    # byte ranges from the buffer's start; sectors are drawn from there (a fresh tensor starts on a sector)
    spans = {lane: (off, off + max(size, 1)) for lane, (off, size) in first.items()}
    lo = min(a for a, _ in spans.values()) // 32
    hi = max(b - 1 for _, b in spans.values()) // 32
    sectors = sorted({s for a, b in spans.values() for s in range(a // 32, (b - 1) // 32 + 1)})
    col = {s: i for i, s in enumerate(sectors)}
    grid = np.zeros((32, len(sectors)))
    for lane, (a, b) in spans.items():
        for s in range(a // 32, (b - 1) // 32 + 1):
            grid[lane, col[s]] = 1
    fig, ax = plt.subplots(figsize=(min(12, 0.3 * len(sectors) + 2), 4.5))
    ax.imshow(grid, cmap="Blues", aspect="auto", interpolation="nearest", vmin=0, vmax=1)
    ax.set_xlabel(f"32-byte sector touched ({len(sectors)} distinct, spanning sectors {lo}..{hi})")
    ax.set_ylabel("lane")
    ax.set_title(title or f"{kp.kernel}: one request of warp {warp} to {buffer}: {len(sectors)} sectors", fontsize=9)
    fig.tight_layout()
    return _save(fig, plt, path)


def bank_map(kp: Any, *, line: int | None = None, op: str | None = None, shape: tuple[int, int] = (32, 32),
             warp: int = 0, title: str | None = None, path: str | Path | None = None) -> Any:
    """Shared-memory banks of a tile and the lanes of one warp-level request on it.

    Cells are the tile's 4-byte words (``shape`` rows x columns from the first shared array's start)
    coloured by bank (word % 32); the words lanes 0-31 of warp ``warp`` (block 0) touch in their first
    access at ``line`` are outlined and labelled with the lane. Lanes whose words share a bank conflict.
    """
    import numpy as np

    plt = _plt()
    rows = _trace(kp, "shared", op, line)
    base = min((s["offset"] for s in kp.shared_arrays if s["offset"] and "dynamic" not in s["name"]),
               default=min(int(t[6]) for t in rows))
    words = np.arange(shape[0] * shape[1]).reshape(shape)
    fig, ax = plt.subplots(figsize=(min(12, 0.3 * shape[1] + 2), min(10, 0.3 * shape[0] + 1.5)))
    ax.imshow((words + base // 4) % 32, cmap="tab20b", interpolation="nearest")
    seen: set[int] = set()
    banks: dict[int, int] = {}
    for _space, _op, _size, _buf, block, tid, off, _ln, _off in rows:
        if block != 0 or tid // 32 != warp or tid % 32 in seen:
            continue
        seen.add(tid % 32)
        w = (int(off) - base) // 4
        if 0 <= w < words.size:
            r, c = divmod(w, shape[1])
            ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, lw=1.5, ec="black"))
            ax.text(c, r, str(tid % 32), ha="center", va="center", fontsize=6, color="white")
        banks[(int(off) // 4) % 32] = banks.get((int(off) // 4) % 32, 0) + 1
    worst = max(banks.values(), default=0)
    ax.set_title(title or f"{kp.kernel}: banks (colour) and warp {warp}'s lanes; up to {worst} lanes per bank",
                 fontsize=9)
    ax.set_xlabel("column (4-byte words)")
    ax.set_ylabel("row")
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str | Path | None) -> Any:
    if path:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig
