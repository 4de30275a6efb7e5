"""Co-placed against isolated placement slowdowns (figures/coplace.png)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from opcost.analysis.optypes import label
from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import message, plt, save


@figure("coplace")
def draw(f: FigureInputs, path: Path) -> None:
    """Co-placed vs isolated slowdowns of the runs of simultaneous placement profiling, or why none ran."""
    from opcost.measure.coplace import compare

    ran = [s for s in f.coplace or [] if not s.get("skipped")]
    if not ran:
        why = "; ".join(sorted({s["skipped"] for s in f.coplace or []})) or "placement.simultaneous is false"
        message(path, "Co-placed vs isolated placement slowdowns",
                f"simultaneous placement profiling not run:\n{why}")
        return
    source = f.measurements["source"]
    cmp = compare(f.measurements[source == "coplace"], f.measurements[source == "isolated"])
    wall = sum(s["wall_s"] for s in ran)
    est = sum(s["isolated_estimate_s"] for s in ran)
    coplace_consistency(cmp, path, est / wall if wall > 0 else None)


def coplace_consistency(compare_df: pd.DataFrame, path: Path, speedup: float | None = None) -> None:
    """Co-placed against isolated placement slowdowns (:func:`opcost.measure.coplace.compare`), one point per
    (configuration, placement) off the fast tier; a text box gives the profiling-time speed-up when known."""
    d = compare_df.dropna(subset=["slowdown_isolated", "slowdown_coplace"]) if len(compare_df) else compare_df
    if len(d):
        d = d[~d["baseline"].astype(bool)]
    if not len(d):
        message(path, "Co-placed vs isolated placement slowdowns",
                 "no (configuration, placement) pair off the fast tier measured both co-placed and isolated")
        return
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    for op_type, q in d.groupby("op_type"):
        ax.scatter(q["slowdown_isolated"], q["slowdown_coplace"], s=18, alpha=0.8, label=label(op_type))
    lo = 0.9 * min(d["slowdown_isolated"].min(), d["slowdown_coplace"].min())
    hi = 1.1 * max(d["slowdown_isolated"].max(), d["slowdown_coplace"].max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="co-placed = isolated")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="gray", alpha=0.15, label="±10%")
    err = (d["slowdown_coplace"] - d["slowdown_isolated"]).abs().median()
    text = f"{len(d)} placements\nmedian |difference| {err:.3f}"
    if speedup is not None:
        text += f"\nprofiling-time speed-up >= {speedup:.2f}x\n(isolated time estimated: a lower bound)"
    ax.text(0.03, 0.97, text, transform=ax.transAxes, va="top", fontsize=8,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8})
    ax.set_xlabel("slowdown vs all on the fast tier, isolated")
    ax.set_ylabel("slowdown vs all on the fast tier, co-placed in the model")
    ax.set_title("Placement slowdowns: co-placed vs isolated")
    ax.legend(fontsize=7, loc="lower right")
    save(fig, path)
