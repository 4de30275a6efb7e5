"""The placement advisor's plans (:mod:`opcost.analysis.advise`) as `opcost advise` prints them (:func:`describe`,
:func:`summary`) and as results/advise/advise.png draws them (:func:`advise_figure`): the predicted slowdown against
the fast-memory budget, per workload, of the optimiser, greedy and first touch, with markers at the config's
budgets (the optimiser's with its interval)."""
from __future__ import annotations

import math
from pathlib import Path

from opcost.analysis.placement_problem import METHODS, Plan, Problem, human
from opcost.report.plot import message as _message, plt, save as _save

STYLE = {"optimiser": ("C0", "-", "o"), "greedy": ("C1", "--", "s"), "first_touch": ("C2", ":", "^")}


def advise_figure(docs: list[dict], path) -> Path:
    """One panel per plan file document (:func:`opcost.analysis.advise.advise`) with a curve; a message where
    none has one (each document's `skipped` says why)."""
    path = Path(path)
    drawn = [d for d in docs if d.get("curve")]
    if not drawn:
        why = sorted({d.get("skipped", "") for d in docs} - {""}) or ["no workload"]
        _message(path, "Placement advice: slowdown vs fast-memory budget", "\n".join(why[:4]))
        return path
    cols = min(3, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, doc in zip(axes.flat, drawn):
        unit, scale = next((u, 2 ** e) for u, e in (("GiB", 30), ("MiB", 20), ("KiB", 10), ("B", 0))
                           if doc["footprint_bytes"] >= 2 ** e or e == 0)
        x = [p["budget_bytes"] / scale for p in doc["curve"]]
        for method, (colour, line, marker) in STYLE.items():
            y = [p[method]["predicted_slowdown"] for p in doc["curve"]]
            ax.plot(x, y, color=colour, linestyle=line, label=method.replace("_", " "))
            chosen = [b[method] | {"x": b["budget_bytes"] / scale} for b in doc.get("budgets", []) if method in b]
            y = [c["predicted_slowdown"] for c in chosen]
            err = [[c["predicted_slowdown"] - c["low_slowdown"] for c in chosen],
                   [c["high_slowdown"] - c["predicted_slowdown"] for c in chosen]] if method == "optimiser" else None
            ax.errorbar([c["x"] for c in chosen], y, yerr=err, color=colour, marker=marker, markersize=4,
                        linestyle="none", capsize=3, zorder=3)
        if doc.get("must_stay_fast_bytes"):
            ax.axvline(doc["must_stay_fast_bytes"] / scale, color="gray", linestyle=":", linewidth=1)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_title(f"{doc['model']} {doc['mode'][:5]} b{doc['batch']}: {doc['fast']} + {doc['slow']}", fontsize=9)
        ax.set_xlabel(f"{doc['fast']} budget ({unit}; dotted: what must stay there)", fontsize=8)
        ax.set_ylabel(f"predicted slowdown vs all on {doc['fast']}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(drawn):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, title="markers: config budgets\n(bars: interval)", title_fontsize=7)
    _save(fig, path)
    return path


def summary(problem: Problem, made: dict[str, Plan]) -> dict:
    """One object (``opcost advise --json``): the workload, the optimiser's plan (tensor -> tier) and prediction,
    and the greedy and first-touch predictions beside it."""
    return {**problem.workload, "fast": problem.fast, "slow": problem.slow, "footprint_bytes": problem.footprint,
            "must_stay_fast_bytes": problem.must_stay_fast, **made["optimiser"].as_dict(problem),
            **{m: made[m].as_dict(problem, with_plan=False) for m in METHODS[1:]}, "notes": list(problem.notes)}


def describe(problem: Problem, made: dict[str, Plan], top: int = 8) -> str:
    """The plans of one budget as text: one line per method, then the largest groups the optimiser puts on the slow
    tier."""
    w, opt = problem.workload, made["optimiser"]
    cond = ", ".join(f"{k} {w[k]}" for k in ("host", "device", "threads") if k in w)
    lines = [f"{w['model']} {w['mode']} b{w['batch']} ({cond}): fast tier {problem.fast}, slow tier {problem.slow}; "
             f"budget {human(opt.budget_bytes)} of {human(problem.footprint)} ({human(problem.must_stay_fast)} must "
             "stay fast)"]
    for m in METHODS:
        p = made[m]
        lines.append(f"  {m:<12} {p.slowdown[0]:.3f}x [{p.slowdown[1]:.3f}, {p.slowdown[2]:.3f}] of all on "
                     f"{problem.fast}: {p.predicted_s * 1e3:.3f} ms, {p.estimated_share:.0%} estimated; "
                     f"{human(p.fast_bytes)} on {problem.fast}, {human(p.slow_bytes)} on {problem.slow}"
                     + (f" (solved in {p.solve_s:.2f} s)" if m == "optimiser" else ""))
    moved = sorted((g for g, s in zip(problem.groups, opt.slow) if s), key=lambda g: -g.bytes)
    if moved:
        lines.append(f"  on {problem.slow}: " + ", ".join(f"{g.name} ({human(g.bytes)})" for g in moved[:top])
                     + (f" and {len(moved) - top} more groups" if len(moved) > top else ""))
    return "\n".join(lines + [f"  note: {n}" for n in problem.notes])
