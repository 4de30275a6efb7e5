"""The coverage loop: coverage per workload against iteration (figures/convergence.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import plt, save


@figure("convergence")
def draw(f: FigureInputs, path: Path) -> None:
    convergence(f.evaluations or [], path)


def convergence(evaluations: list[dict], path: Path) -> None:
    """Coverage per workload against loop iteration, with the target."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list] = {}
    for ev in evaluations:
        for w in ev["workloads"]:
            series.setdefault(f"{w['model']} {w['mode'][:5]} b{w['batch']}", []).append(
                (ev["iteration"], w["coverage"] if w["coverage"] is not None else np.nan))
    for label, pts in series.items():
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", label=label)
    if evaluations:
        ax.axhline(evaluations[-1]["target"], color="black", ls="--", lw=1, label="target")
        ax.set_xticks([ev["iteration"] for ev in evaluations])
        ax.set_title(f"Coverage loop: {len(evaluations)} iteration(s), {evaluations[-1]['stop_reason']}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("fraction of measured time attributed")
    ax.legend(fontsize=7)
    save(fig, path)
