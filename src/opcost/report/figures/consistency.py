"""Isolated against in-situ cost per configuration, and the variation within one (figures/consistency.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opcost.analysis.optypes import label
from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import log_axes, plt, save


@figure("consistency")
def draw(f: FigureInputs, path: Path) -> None:
    consistency(f.consistency, path)


def consistency(cons: pd.DataFrame, path: Path) -> None:
    """Isolated vs in-situ per configuration: are single-config and simultaneous timings similar, and how much do
    the calls of one configuration vary?"""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ax = axes[0]
    if len(cons):
        weight = cons["count"] * cons["insitu_s"]
        for k, (op_type, q) in enumerate(cons.groupby("op_type")):
            ax.scatter(q["insitu_s"] * 1e3, q["isolated_s"] * 1e3, s=10, label=label(op_type),
                       color=plt.cm.tab20(k % 20))
        lo = 0.5 * float(min(cons["insitu_s"].min(), cons["isolated_s"].min())) * 1e3
        hi = 2 * float(max(cons["insitu_s"].max(), cons["isolated_s"].max())) * 1e3
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        log_axes(ax)
        med = float(np.median(cons["ratio"]))
        wmed = float(np.average(cons["ratio"], weights=weight)) if weight.sum() > 0 else float("nan")
        ax.set_title(f"isolated / in-situ: median {med:.2f}, time-weighted mean {wmed:.2f}", fontsize=10)
        ax.legend(fontsize=6, ncol=2)
    ax.set_xlabel("in-situ median per call (ms)")
    ax.set_ylabel("isolated median per call (ms)")
    ax = axes[1]
    if len(cons):
        bins = np.linspace(0, 50, 26)
        ax.hist((cons["insitu_rel_iqr"].astype(float) * 100).clip(upper=50), bins=bins, alpha=0.6,
                label="in-situ (single calls across iterations)")
        ax.hist((cons["isolated_rel_iqr"].astype(float) * 100).clip(upper=50), bins=bins, alpha=0.6,
                label="isolated (single calls in rotation, or blocks of calls)")
    ax.set_xlabel("IQR / median within one configuration (%)")
    ax.set_ylabel("configurations")
    ax.set_title("Variation within one configuration", fontsize=10)
    ax.legend(fontsize=8)
    save(fig, path)
