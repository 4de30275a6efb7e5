"""Model time by operator type: per workload, count x isolated cost of each op type as a fraction of the measured
end-to-end time (figures/breakdown.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opcost.analysis.optypes import labels
from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import TOP_TYPES, plt, save, top_or_other


@figure("breakdown")
def draw(f: FigureInputs, path: Path) -> None:
    breakdown(f.costed, f.predictions[f.predictions["source"] == "isolated"], path)


def breakdown_fractions(costed: pd.DataFrame, predictions: pd.DataFrame, top: int = TOP_TYPES
                        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(forward, backward): per workload (rows) and op type (columns: the ``top`` types, then `other`), count x
    isolated cost of each phase as a fraction of the measured end-to-end time; backward is 0 in inference."""
    costed = costed.assign(op_type=labels(costed),  # Linear and aten::linear, never two unexplained "linear"s
                           backward_total_s=costed["count"] * costed["backward_s"].fillna(0.0))
    keys = ["model", "mode", "batch"]
    per_type = costed.groupby(keys + ["op_type"], as_index=False)[["total_s", "backward_total_s"]].sum()
    per_type, kept = top_or_other(per_type, keys, "total_s", top)
    total = per_type.pivot_table(index=keys, columns="op_type", values="total_s", aggfunc="sum", fill_value=0.0)
    back = per_type.pivot_table(index=keys, columns="op_type", values="backward_total_s", aggfunc="sum",
                                fill_value=0.0).reindex(index=total.index, columns=total.columns, fill_value=0.0)
    pred = predictions.set_index(keys)["measured_s"]
    rows = [i for i in total.index if i in pred.index and pd.notna(pred[i])]
    cols = [c for c in kept if c in total.columns] + (["other"] if "other" in total.columns else [])
    measured = pred.loc[rows].to_numpy(dtype=float)
    back_frac = back.loc[rows, cols].div(measured, axis=0)
    return total.loc[rows, cols].div(measured, axis=0) - back_frac, back_frac


def breakdown(costed: pd.DataFrame, predictions: pd.DataFrame, path: Path) -> None:
    """Per workload: predicted time by op type as a fraction of the measured end-to-end time; in training each op
    type's backward part hatched after its forward part."""
    fwd_frac, back_frac = breakdown_fractions(costed, predictions)
    rows, cols = list(fwd_frac.index), list(fwd_frac.columns)
    fig, ax = plt.subplots(figsize=(10.5, 0.5 * len(rows) + 1.8))
    left = np.zeros(len(rows))
    colors = plt.cm.tab10(np.linspace(0, 1, 10))
    for k, c in enumerate(cols):
        color = "lightgray" if c == "other" else colors[k % 10]
        ax.barh(range(len(rows)), fwd_frac[c], left=left, label=c, color=color)
        left += fwd_frac[c].to_numpy()
        ax.barh(range(len(rows)), back_frac[c], left=left, color=color, hatch="///", edgecolor="white", lw=0)
        left += back_frac[c].to_numpy()
    if back_frac.to_numpy().sum() > 0:
        ax.barh([0], [0], color="white", hatch="///", edgecolor="gray", label="(hatched: backward)")
    ax.axvline(1.0, color="black", lw=1, ls="--", label="measured end-to-end")
    ax.set_yticks(range(len(rows)), [f"{m} {mo[:5]} b{b}" for m, mo, b in rows])
    ax.invert_yaxis()
    ax.set_xlabel("sum of count x isolated operator time, as a fraction of the measured end-to-end time")
    ax.set_title("Model time by operator type")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    save(fig, path)
