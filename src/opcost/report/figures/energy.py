"""Energy by operator type and predicted vs measured energy, or why there is none (figures/energy.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opcost.analysis.optypes import labels
from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import TOP_TYPES, plt, save


@figure("energy")
def draw(f: FigureInputs, path: Path) -> None:
    energy(f.costed, f.predictions, f.measurements, path)


def energy(costed: pd.DataFrame, predictions: pd.DataFrame, measurements: pd.DataFrame, path: Path) -> None:
    """Energy by op type per workload and predicted vs measured energy; where no meter exists, says so (no zeros)."""
    p = predictions[predictions["source"] == "isolated"].dropna(subset=["predicted_j"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    if p.empty:
        hosts = ", ".join(sorted(set(measurements["host"].dropna()))) or "this host"
        for ax in axes:
            ax.set_axis_off()
        fig.text(0.5, 0.5, f"energy unavailable on {hosts}\n(no energy meter: meter = none; values are missing, "
                 "not zero)", ha="center", va="center", fontsize=13)
        save(fig, path)
        return
    costed = costed.dropna(subset=["total_j"])
    per_type = costed.assign(op_type=labels(costed)).groupby(["model", "mode", "batch", "op_type"])["total_j"].sum()
    pivot = per_type.unstack("op_type", fill_value=0.0)
    top = pivot.sum().nlargest(TOP_TYPES).index
    pivot = pivot[top].assign(other=pivot.drop(columns=top).sum(axis=1))
    left = np.zeros(len(pivot))
    for k, c in enumerate(pivot.columns):
        axes[0].barh(range(len(pivot)), pivot[c], left=left, label=c, color=plt.cm.tab10(k % 10))
        left += pivot[c].to_numpy()
    axes[0].set_yticks(range(len(pivot)), [f"{m} {mo[:5]} b{b}" for m, mo, b in pivot.index])
    axes[0].set_xlabel("predicted joules per iteration")
    axes[0].legend(fontsize=7)
    axes[0].set_title("Energy by operator type")
    q = p.dropna(subset=["measured_j"])
    axes[1].scatter(q["measured_j"], q["predicted_j"])
    if len(q):
        lo, hi = float(min(q["measured_j"].min(), q["predicted_j"].min())), float(
            max(q["measured_j"].max(), q["predicted_j"].max()))
        axes[1].plot([lo, hi], [lo, hi], "k--", lw=1)
    axes[1].set_xlabel("measured joules per iteration")
    axes[1].set_ylabel("predicted: sum of count x joules per call")
    axes[1].set_title("Predicted vs measured energy")
    save(fig, path)
