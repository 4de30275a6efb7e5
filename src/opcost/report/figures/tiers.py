"""The whole model on each slower memory tier, predicted and timed (figures/tiers.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import message, plt, save, workload_label


@figure("tiers")
def draw(f: FigureInputs, path: Path) -> None:
    whole_model_tiers(f.tier_costs, f.tiers, path)


def whole_model_tiers(costs: pd.DataFrame | None, tiers: dict | None, path: Path) -> None:
    """The whole model on each slower tier (`tier_costs`): predicted iteration time over the all-fast-tier one, per
    workload and tier (bars, labelled with the share of the time whose slowdown was measured), and the slowdown timed
    end to end with the job's memory on the tier where it ran (diamonds)."""
    if costs is None or costs.empty:
        usable = (tiers or {}).get("usable", [])
        message(path, "The whole model on each memory tier",
                 f"{len(usable)} usable memory tier(s) ({', '.join(usable) or 'none'}): the whole model on a slower "
                 "tier needs two,\nwith placements measured (config placement.tiers)")
        return
    costs = costs.assign(workload=costs.apply(workload_label, axis=1), tier=costs["tier"] + ": " + costs["scenario"])
    pivot = costs.pivot_table(index="workload", columns="tier", values="slowdown", aggfunc="first", sort=False)
    share = costs.pivot_table(index="workload", columns="tier", values="measured_share", aggfunc="first", sort=False)
    timed = costs.pivot_table(index="workload", columns="tier", values="measured_slowdown", aggfunc="first",
                              sort=False, dropna=False)
    timed = timed.reindex(index=pivot.index, columns=pivot.columns)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(pivot) * max(1, pivot.shape[1]) + 1.8))
    height = 0.8 / pivot.shape[1]
    y = np.arange(len(pivot))
    for j, tier in enumerate(pivot.columns):
        vals = pivot[tier].to_numpy(dtype=float)
        ax.barh(y + j * height, vals, height=height, label=tier)
        ends = timed[tier].to_numpy(dtype=float)
        ax.scatter(ends, y + j * height, marker="D", color="k", s=18, zorder=3,
                   label="timed end to end" if j == 0 and np.isfinite(ends).any() else None)
        for yi, v, m, e in zip(y + j * height, vals, share[tier].to_numpy(dtype=float), ends):
            if np.isfinite(v):
                timed_text = f", timed {e:.2f}x" if np.isfinite(e) else ""
                ax.text(max(v, e if np.isfinite(e) else v), yi, f" {v:.2f}x ({m:.0%} measured{timed_text})",
                        va="center", fontsize=7)
    ax.axvline(1.0, color="k", ls="--", lw=0.8)
    ax.set_yticks(y + 0.4 - height / 2, pivot.index, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.2, float(np.nanmax(pivot.to_numpy(dtype=float))),
                       float(np.nanmax(timed.to_numpy(dtype=float), initial=0.0))) * 1.6)
    ax.set_xlabel("iteration time / all on the fast tier (bars: Σ count x cost x each configuration's slowdown)")
    ran = bool(np.isfinite(timed.to_numpy(dtype=float)).any())
    ax.set_title("The whole model on each slower memory tier: " + ("bars predicted, diamonds timed" if ran else
                 "predicted (no end-to-end run on these tiers)"), fontsize=10)
    ax.legend(title="tier: what is on it", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)
