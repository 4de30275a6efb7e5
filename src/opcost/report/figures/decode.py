"""Decode steps against context length, predicted and measured (figures/decode.png)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from opcost.report.figures.registry import FigureInputs, figure
from opcost.report.plot import message, plt, save


@figure("decode", when=lambda f: f.decode is not None)  # a run with decode steps only
def draw(f: FigureInputs, path: Path) -> None:
    decode_steps(f.decode, path)


def decode_steps(curves: pd.DataFrame, path: Path) -> None:
    """Decode steps (:func:`opcost.analysis.decode_curves.curves`): left, time per step against context length per model
    and batch, the predicted line with its interval (shaded) through the measured context lengths and beyond them
    (open markers), the measured steps as filled points, the memory bound dotted (``bound_s``); right, the share of
    the operator time in attention and the cache update (the rest: Linears, norms, activations)."""
    if not len(curves):
        message(path, "Decode steps", "no decode step could be predicted (see the figures log)")
        return
    fig, (ax, share) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 2]})
    colors = plt.cm.tab10(np.linspace(0, 1, 10))
    for k, ((model, batch), c) in enumerate(curves.sort_values("context").groupby(["model", "batch"])):
        color, label = colors[k % 10], f"{model} b{batch}"
        x = c["context"].to_numpy()
        ax.plot(x, c["predicted_s"] * 1e3, color=color, lw=1.5, label=f"{label} predicted")
        ax.fill_between(x, c["low_s"] * 1e3, c["high_s"] * 1e3, color=color, alpha=0.15, lw=0)
        beyond = c[~c["measured"]]
        ax.scatter(beyond["context"], beyond["predicted_s"] * 1e3, facecolors="none", edgecolors=[color], s=30)
        timed = c.dropna(subset=["measured_s"])
        ax.scatter(timed["context"], timed["measured_s"] * 1e3, color=color, marker="D", s=30,
                   label=f"{label} measured")
        if "bound_s" in c and c["bound_s"].notna().any():
            ax.plot(x, c["bound_s"].astype(float) * 1e3, color=color, lw=1, ls=":", label=f"{label} memory bound")
        share.plot(x, c["attention_share"], color=color, marker="o", ms=4, label=label)
    for a in (ax, share):
        a.set_xscale("log", base=2)
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        a.set_xlabel("context length (tokens in the key/value cache)")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("time per step (per token), ms")
    ax.set_title("Decode step: predicted (line, interval shaded; open: never measured) vs measured", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    share.set_ylim(0, 1)
    share.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0%}"))
    share.set_ylabel("share of the operator time")
    share.set_title("Attention + cache update (the rest: 1 - share)", fontsize=9)
    share.legend(fontsize=7, loc="upper left")
    save(fig, path)
