"""Hugging Face generate() predicted from the database against generate() timed (figures/generate.png)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import log_axes, plt, save


@figure("generate", when=lambda f: f.generate is not None)  # a run with config `generate` only
def draw(f: FigureInputs, path: Path) -> None:
    generate_calls(f.generate, path)


def generate_calls(g: pd.DataFrame, path: Path) -> None:
    """Left: each question's whole generate() call, predicted (with its interval) against measured; right: its time
    to the first token, predicted against generate() of one token."""
    from opcost.report.plot import message

    g = g.dropna(subset=["measured_s", "predicted_s"])
    if g.empty:
        message(path, "generate(): predicted vs measured", "no question could be answered (see logs/generate.log)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, (pred, meas, what) in zip(axes, (("predicted_s", "measured_s", "whole generate() call"),
                                             ("ttft_s", "measured_ttft_s", "time to the first token"))):
        x, y = g[meas].astype(float) * 1e3, g[pred].astype(float) * 1e3
        err = None
        if pred == "predicted_s":
            err = [(y - g["low_s"].astype(float) * 1e3).clip(lower=0),
                   (g["high_s"].astype(float) * 1e3 - y).clip(lower=0)]
        ax.errorbar(x, y, yerr=err, fmt="o", capsize=3)
        for (_, r), xi, yi in zip(g.iterrows(), x, y):
            ax.annotate(f"{r['model']} b{r['batch']} {r['prompt']}+{r['new']}", (xi, yi), fontsize=7,
                        xytext=(3, -9), textcoords="offset points")
        lo, hi = 0.5 * min(x.min(), y.min()), 2 * max(x.max(), y.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="prediction = measurement")
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="gray", alpha=0.15,
                        label="±10%")
        log_axes(ax)
        ax.set_xlabel(f"measured {what} (ms)")
        ax.set_ylabel(f"predicted {what} (ms)")
        ax.set_title(f"generate(): {what}", fontsize=9)
        ax.legend(fontsize=8)
    save(fig, path)
