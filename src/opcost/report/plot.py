"""What every figure shares: matplotlib without a display, saving a figure atomically, a notice in place of a
figure, log axes labelled in plain numbers, and the op-type folding of the breakdowns."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402,F401  (the pyplot every figure draws with)
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

TOP_TYPES = 9  # op types a breakdown shows; the rest fold into `other`
TRACE_KEY = ["model", "mode", "batch", "device"]  # a traced workload


def workload_label(r) -> str:
    return f"{r['model']} {r['mode'][:5]} b{r['batch']}"


def log_axes(ax) -> None:
    """Log scales on both axes, labelled in plain numbers at 1, 2 and 5 times the powers of ten (matplotlib's
    minor labels, 2x10^-1 3x10^-1..., overlap on narrow ranges)."""
    for axis, scale in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
        scale("log")
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def save(fig, path: Path) -> None:
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def top_or_other(df: pd.DataFrame, keys: list[str], value: str, top: int) -> tuple[pd.DataFrame, list[str]]:
    """``df`` with op types outside the ``top`` that matter most to some workload (by share of that workload's own
    total, not of the biggest workload) folded into `other`, and that top list."""
    share = df[value] / df.groupby(keys)[value].transform("sum")
    kept = share.groupby(df["op_type"]).max().nlargest(top).index.tolist()
    return df.assign(op_type=df["op_type"].where(df["op_type"].isin(kept), "other")), kept


def message(path: Path, title: str, text: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9)
    save(fig, path)


def short_op(name: str) -> str:
    """A trace's top-level op type, shorter: a backward node as ``bw: AddmmBackward0``; aten ops keep their
    ``aten::`` (the label :func:`opcost.analysis.optypes.label` gives a functional call, never a module's)."""
    return name.replace("autograd::engine::evaluate_function: ", "bw: ")
