"""Dominant top-level operators and idle time, from the Kineto traces (figures/trace_breakdown.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import TOP_TYPES, TRACE_KEY, message, plt, save, short_op, top_or_other


@figure("trace_breakdown")
def draw(f: FigureInputs, path: Path) -> None:
    trace_breakdown(f.trace("op_types"), f.trace("iterations"), path)


def trace_breakdown(op_types: pd.DataFrame, iterations: pd.DataFrame, path: Path, top: int = TOP_TYPES) -> None:
    """Per traced workload (`trace_op_types`, `trace_iterations` rows): time per iteration by top-level op type, the
    ``top`` types that matter most to some workload plus `other`, and the idle/overhead time, as fractions of the
    mean iteration span. GPU workloads show device time and device idle time, CPU ones CPU time."""
    if op_types.empty or iterations.empty:
        message(path, "Dominant operators (traces)", "no traced workload")
        return
    gpu = op_types.groupby(TRACE_KEY)["device_s"].transform(lambda s: s.notna().any())
    t = op_types.assign(t=op_types["device_s"].where(gpu, op_types["cpu_s"]).astype(float))
    t, keep = top_or_other(t, TRACE_KEY, "t", top)
    pivot = t.pivot_table(index=TRACE_KEY, columns="op_type", values="t", aggfunc="sum", fill_value=0.0)
    it = iterations.assign(idle=iterations["device_idle_s"].fillna(iterations["cpu_idle_s"]).astype(float),
                           span=iterations["span_s"].astype(float)).groupby(TRACE_KEY)[["idle", "span"]].mean()
    pivot = pivot.loc[[i for i in pivot.index if i in it.index]]
    cols = [c for c in keep if c in pivot.columns] + (["other"] if "other" in pivot.columns else [])
    frac = pivot[cols].assign(**{"idle / overhead": it.loc[pivot.index, "idle"]}).div(it.loc[pivot.index, "span"],
                                                                                       axis=0)
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(frac) + 2))
    left = np.zeros(len(frac))
    colors = [plt.cm.tab10(i) for i in range(10) if i != 7]  # tab10's gray is kept for "idle / overhead"
    for k, c in enumerate(frac.columns):
        color = {"other": "lightgray", "idle / overhead": "dimgray"}.get(c, colors[k % len(colors)])
        ax.barh(range(len(frac)), frac[c], left=left, label=short_op(c), color=color)
        left += frac[c].to_numpy()
    ax.set_yticks(range(len(frac)), [f"{m} {mo[:5]} b{b} {d}" for m, mo, b, d in frac.index])
    ax.invert_yaxis()
    ax.set_xlabel("fraction of the mean traced iteration (device time on GPU, CPU time on CPU)")
    ax.set_title("Dominant top-level operators and idle time (Kineto traces)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)
