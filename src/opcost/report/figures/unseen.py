"""The `predict_only` workloads: predicted from the database against measured (figures/unseen.png)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import log_axes, message, plt, save


@figure("unseen")
def draw(f: FigureInputs, path: Path) -> None:
    unseen_models(f.unseen, path)


def unseen_models(unseen: pd.DataFrame | None, path: Path) -> None:
    """Predicted (with its interval) vs measured end-to-end time of the workloads never profiled."""
    p = unseen.dropna(subset=["measured_s", "predicted_s"]) if unseen is not None else pd.DataFrame()
    if p.empty:
        message(path, "Models never profiled: predicted vs measured",
                 "no predict_only workload with an end-to-end time\n(config `predict_only`; opcost predict)")
        return
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    x, y = p["measured_s"].astype(float) * 1e3, p["predicted_s"].astype(float) * 1e3
    yerr = [(y - p["low_s"].astype(float) * 1e3).clip(lower=0), (p["high_s"].astype(float) * 1e3 - y).clip(lower=0)]
    for mode, marker in (("inference", "o"), ("training", "s")):
        q = (p["mode"] == mode).to_numpy()
        if q.any():
            ax.errorbar(x[q], y[q], yerr=[yerr[0][q], yerr[1][q]], fmt=marker, capsize=3, label=mode)
    for (_, r), xi, yi in zip(p.iterrows(), x, y):
        ax.annotate(f"{r['model']} b{r['batch']} ({r['estimated_share']:.0%} est.)", (xi, yi), fontsize=7,
                    xytext=(3, -9), textcoords="offset points")
    lo, hi = 0.5 * min(x.min(), y.min()), 2 * max(x.max(), y.max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="prediction = measurement")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="gray", alpha=0.15, label="±10%")
    log_axes(ax)
    ax.set_xlabel("measured end-to-end time per iteration (ms)")
    ax.set_ylabel("predicted from the database, with interval (ms)")
    ax.set_title("Models never profiled: measured costs where the database has them, cost-model estimates "
                 "elsewhere", fontsize=9)
    ax.legend(fontsize=8)
    save(fig, path)
