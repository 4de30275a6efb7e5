"""The CPU overheads T1..T5 per op type, from the Kineto traces (figures/trace_overheads.png)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import TRACE_KEY, message, plt, save, short_op


@figure("trace_overheads")
def draw(f: FigureInputs, path: Path) -> None:
    trace_overheads(f.trace("overhead_samples"), path)


def trace_overheads(samples: pd.DataFrame, path: Path, top: int = 8) -> None:
    """Distributions of the CPU overheads T1..T5 (`trace_overhead_samples`, pooled over workloads): one panel per
    kind present (CPU-only traces: T1 only), box plots of the ``top`` op types with most samples, microseconds."""
    kinds = [k for k in ("T1", "T2", "T3", "T4", "T5") if (samples["kind"] == k).any()] if len(samples) else []
    if not kinds:
        message(path, "CPU overheads (traces)", "no overhead samples")
        return
    ncol = min(len(kinds), 3)
    nrow = -(-len(kinds) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.5 * ncol, 4.2 * nrow), squeeze=False)
    for ax in axes.flat[len(kinds):]:
        ax.set_axis_off()
    what = {"T1": "gap before op", "T2": "op start to 1st launch", "T3": "last launch to op end",
            "T4": "launch call", "T5": "between launches"}
    for ax, kind in zip(axes.flat, kinds):
        s = samples[samples["kind"] == kind]
        types = s["op_type"].value_counts().index[:top].tolist()
        data = [s.loc[s["op_type"] == t, "seconds"].astype(float).to_numpy() * 1e6 for t in types]
        ax.boxplot(data, showfliers=True, flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(types) + 1), [short_op(t) for t in types], rotation=45, ha="right", fontsize=7)
        ax.set_yscale("symlog", linthresh=1.0)
        top_us = max((float(d.max()) for d in data if len(d)), default=1.0)
        ax.set_ylim(0, max(top_us, 1.0) * 2)
        ax.set_ylabel("microseconds")
        ax.set_title(f"{kind}: {what[kind]} (n={len(s)})", fontsize=10)
    fig.suptitle(f"CPU overheads per op type ({samples[TRACE_KEY].drop_duplicates().shape[0]} workload(s))"
                 if set(TRACE_KEY) <= set(samples.columns) else "CPU overheads per op type")
    save(fig, path)
