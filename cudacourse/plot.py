"""Charts for benchmark results (matplotlib, headless-safe)."""

from __future__ import annotations

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
