"""Predicted against measured end-to-end time per workload (figures/predicted_vs_measured.png)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import log_axes, plt, save


@figure("predicted_vs_measured")
def draw(f: FigureInputs, path: Path) -> None:
    predicted_vs_measured(f.predictions, path)


def predicted_vs_measured(predictions: pd.DataFrame, path: Path) -> None:
    p = predictions.dropna(subset=["measured_s"])
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = {"isolated": "tab:blue", "insitu": "tab:orange", "isolated+overhead": "tab:green",
              "insitu+overhead": "tab:red"}
    for (source, mode), q in p.groupby(["source", "mode"]):
        ax.scatter(q["measured_s"] * 1e3, q["predicted_s"] * 1e3, marker="o" if mode == "inference" else "s",
                   color=colors.get(source, "gray"), label=f"{source}, {mode}", alpha=0.8,
                   facecolors="none" if source.endswith("+overhead") else None)
        if source == "isolated":
            for _, r in q.iterrows():
                ax.annotate(f"{r['model']} b{r['batch']}", (r["measured_s"] * 1e3, r["predicted_s"] * 1e3),
                            fontsize=7, xytext=(3, -9), textcoords="offset points")
    if len(p):
        lo = 0.5 * min(p["measured_s"].min(), p["predicted_s"].min()) * 1e3
        hi = 2 * max(p["measured_s"].max(), p["predicted_s"].max()) * 1e3
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="prediction = measurement")
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="gray", alpha=0.15,
                        label="±10%")
        log_axes(ax)
    stat = ", ".join(sorted(set(p["statistic"].dropna()))) if "statistic" in p else ""
    stat = stat.replace("_", " ") or "time"
    ax.set_xlabel(f"measured end-to-end {stat} per iteration (ms)")
    ax.set_ylabel(f"predicted: sum of count x operator {stat} per call (ms)")
    ax.set_title("Predicted vs measured (isolated / in-situ costs; +overhead: with the trace's modelled gaps)",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the points, never over them
    save(fig, path)
