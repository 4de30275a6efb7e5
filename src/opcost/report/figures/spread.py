"""Relative spread of the operator and end-to-end measurements (figures/spread.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import plt, save


@figure("spread")
def draw(f: FigureInputs, path: Path) -> None:
    from opcost.analysis.predict import baseline

    m = f.measurements
    spread(m[(m["source"] == "isolated") & baseline(m)], f.e2e, path)


def spread(measurements: pd.DataFrame, e2e: pd.DataFrame, path: Path) -> None:
    """Distribution of relative measurement spread (IQR/median and CI half-width/median)."""
    ok = measurements[measurements["status"] == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (name, df) in zip(axes, (("operator configurations", ok), ("end-to-end runs", e2e))):
        if len(df):
            rel_iqr = (df["iqr_s"] / df["median_s"]).astype(float) * 100
            rel_ci = ((df["ci_high_s"] - df["ci_low_s"]) / 2 / df["median_s"]).astype(float) * 100
            bins = np.linspace(0, max(1.0, float(np.nanpercentile(rel_iqr, 99))), 30)
            ax.hist(rel_iqr.clip(upper=bins[-1]), bins=bins, alpha=0.6, label="IQR / median")
            ax.hist(rel_ci.clip(upper=bins[-1]), bins=bins, alpha=0.6, label="95% CI half-width / median")
        ax.set_xlabel("% of median")
        ax.set_ylabel("count")
        ax.set_title(f"Measurement spread: {name} (n={len(df)})")
        ax.legend(fontsize=8)
    save(fig, path)
