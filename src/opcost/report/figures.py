"""Figures under results/figures: what each operator type costs per model, and whether the costs add up."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

TOP_TYPES = 9


def _label(r) -> str:
    return f"{r['model']} {r['mode'][:5]} b{r['batch']}"


def _log_axes(ax) -> None:
    """Log scales on both axes, labelled in plain numbers at 1, 2 and 5 times the powers of ten (matplotlib's
    minor labels, 2x10^-1 3x10^-1..., overlap on narrow ranges)."""
    for axis, scale in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
        scale("log")
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def _top_or_other(df: pd.DataFrame, keys: list[str], value: str, top: int) -> tuple[pd.DataFrame, list[str]]:
    """``df`` with op types outside the ``top`` that matter most to some workload (by share of that workload's own
    total, not of the biggest workload) folded into `other`, and that top list."""
    share = df[value] / df.groupby(keys)[value].transform("sum")
    kept = share.groupby(df["op_type"]).max().nlargest(top).index.tolist()
    return df.assign(op_type=df["op_type"].where(df["op_type"].isin(kept), "other")), kept


def breakdown_fractions(costed: pd.DataFrame, predictions: pd.DataFrame, top: int = TOP_TYPES
                        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(forward, backward): per workload (rows) and op type (columns: the ``top`` types, then `other`), count x
    isolated cost of each phase as a fraction of the measured end-to-end time; backward is 0 in inference."""
    costed = costed.assign(backward_total_s=costed["count"] * costed["backward_s"].fillna(0.0))
    keys = ["model", "mode", "batch"]
    per_type = costed.groupby(keys + ["op_type"], as_index=False)[["total_s", "backward_total_s"]].sum()
    per_type, kept = _top_or_other(per_type, keys, "total_s", top)
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
    _save(fig, path)


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
        _log_axes(ax)
    stat = ", ".join(sorted(set(p["statistic"].dropna()))) if "statistic" in p else ""
    stat = stat.replace("_", " ") or "time"
    ax.set_xlabel(f"measured end-to-end {stat} per iteration (ms)")
    ax.set_ylabel(f"predicted: sum of count x operator {stat} per call (ms)")
    ax.set_title("Predicted vs measured (isolated / in-situ costs; +overhead: with the trace's modelled gaps)",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the points, never over them
    _save(fig, path)


def consistency(cons: pd.DataFrame, path: Path) -> None:
    """Isolated vs in-situ per configuration: are single-config and simultaneous timings similar, and how much do
    the calls of one configuration vary?"""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ax = axes[0]
    if len(cons):
        weight = cons["count"] * cons["insitu_s"]
        for k, (op_type, q) in enumerate(cons.groupby("op_type")):
            ax.scatter(q["insitu_s"] * 1e3, q["isolated_s"] * 1e3, s=10, label=op_type,
                       color=plt.cm.tab20(k % 20))
        lo = 0.5 * float(min(cons["insitu_s"].min(), cons["isolated_s"].min())) * 1e3
        hi = 2 * float(max(cons["insitu_s"].max(), cons["isolated_s"].max())) * 1e3
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        _log_axes(ax)
        med = float(np.median(cons["ratio"]))
        wmed = float(np.average(cons["ratio"], weights=weight)) if weight.sum() > 0 else float("nan")
        ax.set_title(f"isolated / in-situ: median {med:.2f}, time-weighted mean {wmed:.2f}", fontsize=10)
        ax.legend(fontsize=6, ncol=2)
    ax.set_xlabel("in-situ median per call (ms)")
    ax.set_ylabel("isolated median per call (ms)")
    ax = axes[1]
    if len(cons):
        bins = np.linspace(0, 50, 26)
        ax.hist((cons["insitu_rel_iqr"].astype(float) * 100).clip(upper=50), bins=bins, alpha=0.6,
                label="in-situ (single calls across iterations)")
        ax.hist((cons["isolated_rel_iqr"].astype(float) * 100).clip(upper=50), bins=bins, alpha=0.6,
                label="isolated (single calls in rotation, or blocks of calls)")
    ax.set_xlabel("IQR / median within one configuration (%)")
    ax.set_ylabel("configurations")
    ax.set_title("Variation within one configuration", fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, path)


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
    _save(fig, path)


def convergence(evaluations: list[dict], path: Path) -> None:
    """Coverage per workload against loop iteration, with the target."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list] = {}
    for ev in evaluations:
        for w in ev["workloads"]:
            series.setdefault(f"{w['model']} {w['mode'][:5]} b{w['batch']}", []).append(
                (ev["iteration"], w["coverage"] if w["coverage"] is not None else np.nan))
    for label, pts in series.items():
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", label=label)
    if evaluations:
        ax.axhline(evaluations[-1]["target"], color="black", ls="--", lw=1, label="target")
        ax.set_xticks([ev["iteration"] for ev in evaluations])
        ax.set_title(f"Coverage loop: {len(evaluations)} iteration(s), {evaluations[-1]['stop_reason']}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("fraction of measured time attributed")
    ax.legend(fontsize=7)
    _save(fig, path)


def energy(costed: pd.DataFrame, predictions: pd.DataFrame, measurements: pd.DataFrame, path: Path) -> None:
    """Energy by op type per workload and predicted vs measured energy; where no meter exists, says so (no zeros)."""
    p = predictions[predictions["source"] == "isolated"].dropna(subset=["predicted_j"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    if p.empty:
        hosts = ", ".join(sorted(set(measurements["host"].dropna()))) or "this host"
        for ax in axes:
            ax.set_axis_off()
        fig.text(0.5, 0.5, f"energy unavailable on {hosts}\n(no energy meter: meter = none; values are missing, "
                 "not zero)", ha="center", va="center", fontsize=13)
        _save(fig, path)
        return
    per_type = costed.dropna(subset=["total_j"]).groupby(["model", "mode", "batch", "op_type"])["total_j"].sum()
    pivot = per_type.unstack("op_type", fill_value=0.0)
    top = pivot.sum().nlargest(TOP_TYPES).index
    pivot = pivot[top].assign(other=pivot.drop(columns=top).sum(axis=1))
    left = np.zeros(len(pivot))
    for k, c in enumerate(pivot.columns):
        axes[0].barh(range(len(pivot)), pivot[c], left=left, label=c, color=plt.cm.tab10(k % 10))
        left += pivot[c].to_numpy()
    axes[0].set_yticks(range(len(pivot)), [f"{m} {mo[:5]} b{b}" for m, mo, b in pivot.index])
    axes[0].set_xlabel("predicted joules per iteration")
    axes[0].legend(fontsize=7)
    axes[0].set_title("Energy by operator type")
    q = p.dropna(subset=["measured_j"])
    axes[1].scatter(q["measured_j"], q["predicted_j"])
    if len(q):
        lo, hi = float(min(q["measured_j"].min(), q["predicted_j"].min())), float(
            max(q["measured_j"].max(), q["predicted_j"].max()))
        axes[1].plot([lo, hi], [lo, hi], "k--", lw=1)
    axes[1].set_xlabel("measured joules per iteration")
    axes[1].set_ylabel("predicted: sum of count x joules per call")
    axes[1].set_title("Predicted vs measured energy")
    _save(fig, path)


def placement(measurements: pd.DataFrame, tiers: dict | None, path: Path) -> None:
    """Placement sensitivity: median forward slowdown of each placement class relative to all-fast-tier, per op
    type."""
    from opcost.analysis.tiers import placement_slowdowns

    s = placement_slowdowns(measurements)
    s = s[s["phase"] == "forward"]
    pivot = s.pivot_table(index="op_type", columns="cls", values="slowdown", aggfunc="median")
    usable = (tiers or {}).get("usable", [])
    if pivot.shape[1] < 2:
        skipped = (tiers or {}).get("skipped", {})
        why = "; ".join(skipped.values()) if skipped else "configure two or more tiers under placement.tiers"
        _message(path, "Placement sensitivity", f"{len(usable)} usable memory tier(s) ({', '.join(usable) or 'none'})"
                 f": a slowdown needs two.\n{why}")
        return
    fig, ax = plt.subplots(figsize=(1.2 * pivot.shape[1] + 3, 0.35 * len(pivot) + 2))
    values = pivot.to_numpy(dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    reach = max(1.05, float(np.max(np.maximum(finite, 1.0 / finite)))) if finite.size else 1.05
    # a log scale centred on 1: a 2x slowdown and a 2x speed-up get colours equally far from white
    im = ax.imshow(values, cmap="RdBu_r", aspect="auto", norm=LogNorm(vmin=1.0 / reach, vmax=reach))
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            dark = v > 0 and abs(np.log(v)) > 0.6 * np.log(reach)
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(pivot.shape[1]), pivot.columns, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(pivot)), pivot.index, fontsize=8)
    fig.colorbar(im, ax=ax, label="median time / all on the fast tier")
    ax.set_title(f"Placement sensitivity (tiers: {', '.join(usable)}; fast tier first)")
    _save(fig, path)


def whole_model_tiers(costs: pd.DataFrame | None, tiers: dict | None, path: Path) -> None:
    """The whole model on each slower tier (`tier_costs`): predicted iteration time over the all-fast-tier one, per
    workload and tier (bars, labelled with the share of the time whose slowdown was measured), and the slowdown timed
    end to end with the job's memory on the tier where it ran (diamonds)."""
    if costs is None or costs.empty:
        usable = (tiers or {}).get("usable", [])
        _message(path, "The whole model on each memory tier",
                 f"{len(usable)} usable memory tier(s) ({', '.join(usable) or 'none'}): the whole model on a slower "
                 "tier needs two,\nwith placements measured (config placement.tiers)")
        return
    costs = costs.assign(workload=costs.apply(_label, axis=1), tier=costs["tier"] + ": " + costs["scenario"])
    pivot = costs.pivot_table(index="workload", columns="tier", values="slowdown", aggfunc="first", sort=False)
    share = costs.pivot_table(index="workload", columns="tier", values="measured_share", aggfunc="first", sort=False)
    timed = costs.pivot_table(index="workload", columns="tier", values="measured_slowdown", aggfunc="first",
                              sort=False, dropna=False)
    timed = timed.reindex(index=pivot.index, columns=pivot.columns)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(pivot) * max(1, pivot.shape[1]) + 1.8))
    height = 0.8 / pivot.shape[1]
    y = np.arange(len(pivot))
    for j, tier in enumerate(pivot.columns):
        vals = pivot[tier].to_numpy(dtype=float)
        ax.barh(y + j * height, vals, height=height, label=tier)
        ends = timed[tier].to_numpy(dtype=float)
        ax.scatter(ends, y + j * height, marker="D", color="k", s=18, zorder=3,
                   label="timed end to end" if j == 0 and np.isfinite(ends).any() else None)
        for yi, v, m, e in zip(y + j * height, vals, share[tier].to_numpy(dtype=float), ends):
            if np.isfinite(v):
                timed_text = f", timed {e:.2f}x" if np.isfinite(e) else ""
                ax.text(max(v, e if np.isfinite(e) else v), yi, f" {v:.2f}x ({m:.0%} measured{timed_text})",
                        va="center", fontsize=7)
    ax.axvline(1.0, color="k", ls="--", lw=0.8)
    ax.set_yticks(y + 0.4 - height / 2, pivot.index, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.2, float(np.nanmax(pivot.to_numpy(dtype=float))),
                       float(np.nanmax(timed.to_numpy(dtype=float), initial=0.0))) * 1.6)
    ax.set_xlabel("iteration time / all on the fast tier (bars: Σ count x cost x each configuration's slowdown)")
    ran = bool(np.isfinite(timed.to_numpy(dtype=float)).any())
    ax.set_title("The whole model on each slower memory tier: " + ("bars predicted, diamonds timed" if ran else
                 "predicted (no end-to-end run on these tiers)"), fontsize=10)
    ax.legend(title="tier: what is on it", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)


def _message(path: Path, title: str, text: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9)
    _save(fig, path)


def make_all(costed, predictions, measurements, e2e, cons, evaluations, outdir, tiers=None, traces=None,
             coplace=None, unseen=None, tier_costs=None) -> list[Path]:
    """Every figure; ``traces``: the `trace_op_types`, `trace_iterations` and `trace_overhead_samples` frames
    (keys ``op_types``, ``iterations``, ``overhead_samples``); ``coplace``: simultaneous placement profiling
    summaries (JSON dicts), None or [] when it is not enabled; ``unseen``: `predict_only` predictions (source
    `estimated`), None when the config has none; ``tier_costs``: the `tier_costs` table, None without placements."""
    from opcost.analysis.predict import baseline

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{n}.png" for n in ("breakdown", "predicted_vs_measured", "spread", "consistency",
                                           "convergence", "energy", "placement", "trace_breakdown",
                                           "trace_overheads", "coplace", "unseen", "tiers")]
    breakdown(costed, predictions[predictions["source"] == "isolated"], paths[0])
    predicted_vs_measured(predictions, paths[1])
    spread(measurements[(measurements["source"] == "isolated") & baseline(measurements)], e2e, paths[2])
    consistency(cons, paths[3])
    convergence(evaluations or [], paths[4])
    energy(costed, predictions, measurements, paths[5])
    placement(measurements, tiers, paths[6])
    traces = traces or {}
    empty = pd.DataFrame(columns=["model", "mode", "batch", "kind"])
    trace_breakdown(traces.get("op_types", empty), traces.get("iterations", empty), paths[7])
    trace_overheads(traces.get("overhead_samples", empty), paths[8])
    _coplace(measurements, coplace, paths[9])
    unseen_models(unseen, paths[10])
    whole_model_tiers(tier_costs, tiers, paths[11])
    return paths


def unseen_models(unseen: pd.DataFrame | None, path: Path) -> None:
    """Predicted (with its interval) vs measured end-to-end time of the workloads never profiled."""
    p = unseen.dropna(subset=["measured_s", "predicted_s"]) if unseen is not None else pd.DataFrame()
    if p.empty:
        _message(path, "Models never profiled: predicted vs measured",
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
    _log_axes(ax)
    ax.set_xlabel("measured end-to-end time per iteration (ms)")
    ax.set_ylabel("predicted from the database, with interval (ms)")
    ax.set_title("Models never profiled: measured costs where the database has them, cost-model estimates "
                 "elsewhere", fontsize=9)
    ax.legend(fontsize=8)
    _save(fig, path)


def _coplace(measurements: pd.DataFrame, summaries, path: Path) -> None:
    from opcost.measure.coplace import compare

    ran = [s for s in summaries or [] if not s.get("skipped")]
    if not ran:
        why = "; ".join(sorted({s["skipped"] for s in summaries or []})) or "placement.simultaneous is false"
        _message(path, "Co-placed vs isolated placement slowdowns",
                 f"simultaneous placement profiling not run:\n{why}")
        return
    source = measurements["source"]
    cmp = compare(measurements[source == "coplace"], measurements[source == "isolated"])
    wall = sum(s["wall_s"] for s in ran)
    est = sum(s["isolated_estimate_s"] for s in ran)
    coplace_consistency(cmp, path, est / wall if wall > 0 else None)


_TRACE_KEY = ["model", "mode", "batch", "device"]


def _short_op(name: str) -> str:
    return name.replace("autograd::engine::evaluate_function: ", "bw: ").replace("aten::", "")


def trace_breakdown(op_types: pd.DataFrame, iterations: pd.DataFrame, path: Path, top: int = TOP_TYPES) -> None:
    """Per traced workload (`trace_op_types`, `trace_iterations` rows): time per iteration by top-level op type, the
    ``top`` types that matter most to some workload plus `other`, and the idle/overhead time, as fractions of the
    mean iteration span. GPU workloads show device time and device idle time, CPU ones CPU time."""
    if op_types.empty or iterations.empty:
        _message(path, "Dominant operators (traces)", "no traced workload")
        return
    gpu = op_types.groupby(_TRACE_KEY)["device_s"].transform(lambda s: s.notna().any())
    t = op_types.assign(t=op_types["device_s"].where(gpu, op_types["cpu_s"]).astype(float))
    t, keep = _top_or_other(t, _TRACE_KEY, "t", top)
    pivot = t.pivot_table(index=_TRACE_KEY, columns="op_type", values="t", aggfunc="sum", fill_value=0.0)
    it = iterations.assign(idle=iterations["device_idle_s"].fillna(iterations["cpu_idle_s"]).astype(float),
                           span=iterations["span_s"].astype(float)).groupby(_TRACE_KEY)[["idle", "span"]].mean()
    pivot = pivot.loc[[i for i in pivot.index if i in it.index]]
    cols = [c for c in keep if c in pivot.columns] + (["other"] if "other" in pivot.columns else [])
    frac = pivot[cols].assign(**{"idle / overhead": it.loc[pivot.index, "idle"]}).div(it.loc[pivot.index, "span"],
                                                                                       axis=0)
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(frac) + 2))
    left = np.zeros(len(frac))
    colors = [plt.cm.tab10(i) for i in range(10) if i != 7]  # tab10's gray is kept for "idle / overhead"
    for k, c in enumerate(frac.columns):
        color = {"other": "lightgray", "idle / overhead": "dimgray"}.get(c, colors[k % len(colors)])
        ax.barh(range(len(frac)), frac[c], left=left, label=_short_op(c), color=color)
        left += frac[c].to_numpy()
    ax.set_yticks(range(len(frac)), [f"{m} {mo[:5]} b{b} {d}" for m, mo, b, d in frac.index])
    ax.invert_yaxis()
    ax.set_xlabel("fraction of the mean traced iteration (device time on GPU, CPU time on CPU)")
    ax.set_title("Dominant top-level operators and idle time (Kineto traces)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)


def trace_overheads(samples: pd.DataFrame, path: Path, top: int = 8) -> None:
    """Distributions of the CPU overheads T1..T5 (`trace_overhead_samples`, pooled over workloads): one panel per
    kind present (CPU-only traces: T1 only), box plots of the ``top`` op types with most samples, microseconds."""
    kinds = [k for k in ("T1", "T2", "T3", "T4", "T5") if (samples["kind"] == k).any()] if len(samples) else []
    if not kinds:
        _message(path, "CPU overheads (traces)", "no overhead samples")
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
        ax.set_xticks(range(1, len(types) + 1), [_short_op(t) for t in types], rotation=45, ha="right", fontsize=7)
        ax.set_yscale("symlog", linthresh=1.0)
        top_us = max((float(d.max()) for d in data if len(d)), default=1.0)
        ax.set_ylim(0, max(top_us, 1.0) * 2)
        ax.set_ylabel("microseconds")
        ax.set_title(f"{kind}: {what[kind]} (n={len(s)})", fontsize=10)
    fig.suptitle(f"CPU overheads per op type ({samples[_TRACE_KEY].drop_duplicates().shape[0]} workload(s))"
                 if set(_TRACE_KEY) <= set(samples.columns) else "CPU overheads per op type")
    _save(fig, path)


def coplace_consistency(compare_df: pd.DataFrame, path: Path, speedup: float | None = None) -> None:
    """Co-placed against isolated placement slowdowns (:func:`opcost.measure.coplace.compare`), one point per
    (configuration, placement) off the fast tier; a text box gives the profiling-time speed-up when known."""
    d = compare_df.dropna(subset=["slowdown_isolated", "slowdown_coplace"]) if len(compare_df) else compare_df
    if len(d):
        d = d[~d["baseline"].astype(bool)]
    if not len(d):
        _message(path, "Co-placed vs isolated placement slowdowns",
                 "no (configuration, placement) pair off the fast tier measured both co-placed and isolated")
        return
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    for op_type, q in d.groupby("op_type"):
        ax.scatter(q["slowdown_isolated"], q["slowdown_coplace"], s=18, alpha=0.8, label=op_type)
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
    _save(fig, path)


def decode_steps(curves: pd.DataFrame, path: Path) -> None:
    """Decode steps (:func:`opcost.analysis.decode.curves`): left, time per step against context length per model
    and batch, the predicted line with its interval (shaded) through the measured context lengths and beyond them
    (open markers), the measured steps as filled points; right, the share of the operator time in attention and the
    cache update (the rest: Linears, norms, activations)."""
    if not len(curves):
        _message(path, "Decode steps", "no decode step could be predicted (see the figures log)")
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
    _save(fig, path)
