"""Placement sensitivity: slowdown of each placement class per op type (figures/placement.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from opcost.analysis.optypes import label
from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import message, plt, save


@figure("placement")
def draw(f: FigureInputs, path: Path) -> None:
    placement(f.measurements, f.tiers, path)


def placement(measurements: pd.DataFrame, tiers: dict | None, path: Path) -> None:
    """Placement sensitivity: median forward slowdown of each placement class relative to all-fast-tier, per op
    type."""
    from opcost.analysis.tiers import placement_slowdowns

    s = placement_slowdowns(measurements)
    s = s[s["phase"] == "forward"]
    pivot = s.pivot_table(index="op_type", columns="cls", values="slowdown", aggfunc="median")
    pivot.index = [label(t) for t in pivot.index]
    usable = (tiers or {}).get("usable", [])
    if pivot.shape[1] < 2:
        skipped = (tiers or {}).get("skipped", {})
        why = "; ".join(skipped.values()) if skipped else "configure two or more tiers under placement.tiers"
        message(path, "Placement sensitivity", f"{len(usable)} usable memory tier(s) ({', '.join(usable) or 'none'})"
                 f": a slowdown needs two.\n{why}")
        return
    fig, ax = plt.subplots(figsize=(1.2 * pivot.shape[1] + 3, 0.35 * len(pivot) + 2))
    values = pivot.to_numpy(dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    reach = max(1.05, float(np.max(np.maximum(finite, 1.0 / finite)))) if finite.size else 1.05
    # a log scale centred on 1: a 2x slowdown and a 2x speed-up get colours equally far from white
    im = ax.imshow(values, cmap="RdBu_r", aspect="auto", norm=LogNorm(vmin=1.0 / reach, vmax=reach))
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            dark = v > 0 and abs(np.log(v)) > 0.6 * np.log(reach)
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(pivot.shape[1]), pivot.columns, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(pivot)), pivot.index, fontsize=8)
    fig.colorbar(im, ax=ax, label="median time / all on the fast tier")
    ax.set_title(f"Placement sensitivity (tiers: {', '.join(usable)}; fast tier first)")
    save(fig, path)
