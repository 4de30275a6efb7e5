"""The end of a run in a few lines (``results/summary.txt``, also printed when the run ends): per workload the
prediction against its end-to-end reference and its coverage, the coverage loop's outcome, the predictions of
models never profiled, the failures, and where the figures and the report are."""
from __future__ import annotations

import numpy as np
import pandas as pd

from opcost import rerun
from opcost.analysis.calibration import left_out
from opcost.failures import text as failure_text

SHOWN_SOURCES = ("isolated+overhead", "isolated", "insitu+overhead", "insitu")  # the first a workload has is shown


def _ms(seconds) -> str:
    return "-" if pd.isna(seconds) else f"{float(seconds) * 1e3:.3f}"


def _pct(x) -> str:
    return "-" if pd.isna(x) else f"{float(x) * 100:+.1f}%"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in rows]


def measured_between(measurements: pd.DataFrame, e2e: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The first and last `timestamp` of the database's isolated operator rows and of its end-to-end rows (what
    a reader needs to see that costs and references were measured in the same minutes)."""
    out = {}
    for what, rows in (("operators", measurements[measurements["source"] == "isolated"]), ("end to end", e2e)):
        stamps = rows["timestamp"].dropna()
        if len(stamps):
            out[what] = (str(stamps.min()), str(stamps.max()))
    return out


def run_facts(measurements: pd.DataFrame, e2e: pd.DataFrame, config: dict) -> dict:
    """What the summary says of the run's conditions: when it measured, the process its costs hold in, and how much
    longer a plain process took (:func:`measured_between`, :func:`opcost.measure.plain.plain_gaps`)."""
    from opcost.measure.plain import PROCESS, fault_extras, plain_gaps

    pinned = "pinned" if config.get("affinity") == "pin" else "not pinned"
    return {"measured": measured_between(measurements, e2e), "plain": plain_gaps(e2e),
            "faults": {w: s for w, s in fault_extras(e2e).items() if s > 0},
            "process": f"{PROCESS.format(threads=config.get('threads'))} {pinned}"}


def _unseen_lines(unseen: pd.DataFrame | None) -> list[str]:
    """The summary's section on the `predict_only` predictions."""
    if unseen is None or unseen.empty:
        return []
    rows = [["workload", "predicted ms", "interval ms", "measured ms", "error", "estimated"]]
    for r in unseen.itertuples():
        rows.append([f"{r.model}/{r.mode}/b{int(r.batch)}", _ms(r.predicted_s),
                     f"{_ms(r.low_s)}..{_ms(r.high_s)}", _ms(r.measured_s), _pct(r.error),
                     "-" if pd.isna(r.estimated_share) else f"{float(r.estimated_share) * 100:.0f}%"])
    out = ["", "Never profiled (predict_only), predicted from the database:", *_table(rows)]
    for mode, g in unseen.groupby("mode"):
        got = left_out(g)
        if got is not None:
            half, models, held = got
            out.append(f"  {mode}: a model never profiled is estimated within x{np.exp(half):.2f} either way (90%, "
                       f"from these {models} models' errors); each left out in turn, the others' range held "
                       f"{held} of {models}")
    return out


def _generate_lines(generate: pd.DataFrame | None) -> list[str]:
    """The summary's section on generate() (config `generate`)."""
    if generate is None or generate.empty:
        return []
    rows = [["generate()", "predicted ms", "interval ms", "measured ms", "error", "first token ms",
             "measured", "tokens/s", "estimated", "memory bound ms"]]
    for r in generate.itertuples():
        rows.append([f"{r.model} b{int(r.batch)} {int(r.prompt)}+{int(r.new)}", _ms(r.predicted_s),
                     f"{_ms(r.low_s)}..{_ms(r.high_s)}", _ms(r.measured_s), _pct(r.error), _ms(r.ttft_s),
                     _ms(r.measured_ttft_s), f"{float(r.tokens_per_s):.1f}",
                     f"{float(r.estimated_share) * 100:.0f}%", _ms(r.bound_s)])
    return ["", "Hugging Face generate() (prompt + new tokens), predicted from the database against generate() "
                "timed in turn with the model's measured decode step:", *_table(rows)]


def _tier_lines(tier_costs: pd.DataFrame | None) -> list[str]:
    """The summary's section on the whole model on each slower memory tier."""
    if tier_costs is None or tier_costs.empty:
        return []
    rows = [["workload", "tier", "on the tier", "fast tier ms", "predicted ms", "slowdown", "slowdowns measured",
             "timed end to end", "error"]]
    for r in tier_costs.itertuples():
        timed = "-" if pd.isna(r.measured_slowdown) else (
            f"{float(r.measured_slowdown):.2f}x" + ("" if pd.notna(r.placement_ok) and r.placement_ok
                                                    else " (placement mismatch)"))
        rows.append([f"{r.model}/{r.mode}/b{int(r.batch)}", r.tier, r.scenario, _ms(r.baseline_s),
                     _ms(r.predicted_s), f"{float(r.slowdown):.2f}x", f"{float(r.measured_share) * 100:.0f}%",
                     timed, _pct(r.error)])
    return ["", "The whole model on each slower memory tier, predicted (Σ count x cost x the configuration's "
                "slowdown there) and, on NUMA tiers, timed end to end with the job's memory on the tier:",
            *_table(rows)]


def run_summary(predictions: pd.DataFrame, loop: list[dict], failures: pd.DataFrame,
                unseen: pd.DataFrame | None = None, figures_dir: str = "results/figures",
                tier_costs: pd.DataFrame | None = None, facts: dict | None = None,
                generate: pd.DataFrame | None = None) -> str:
    """The summary text. ``predictions``: the `predictions` table; ``loop``: results/loop/summary.json (one entry
    per iteration); ``failures``: the `failures` table; ``unseen``: the `predict_only` predictions, if any;
    ``tier_costs``: the whole model on each slower memory tier, if placements were measured; ``facts``:
    :func:`run_facts`; ``generate``: the `generate` table (config `generate`), if any."""
    lines = ["opcost run summary", ""]
    last = loop[-1] if loop else {}
    coverage = {(w["model"], w["mode"], int(w["batch"])): w.get("coverage") for w in last.get("workloads", [])}
    if predictions.empty:
        lines.append("No workload was predicted (see the failures below).")
    else:
        rows = [["workload", "source", "predicted ms", "measured ms", "reference", "ref. spread", "error",
                 "vs your script", "coverage"]]
        for (model, mode, batch), g in predictions.groupby(["model", "mode", "batch"], sort=False):
            g = g.set_index("source")
            source = next((s for s in SHOWN_SOURCES if s in g.index), g.index[0])
            r = g.loc[source]
            cov = coverage.get((model, mode, int(batch)))
            spread = r.get("reference_spread")
            rows.append([f"{model}/{mode}/b{int(batch)}", source, _ms(r["predicted_s"]), _ms(r["measured_s"]),
                         str(r["reference"]), "-" if pd.isna(spread) else f"{float(spread) * 100:.0f}%",
                         _pct(r["error"]), _pct(r.get("error_plain")), "-" if cov is None else f"{cov:.2f}"])
        lines += ["Predicted (Σ count x cost per call) against each workload's end-to-end reference (ref. spread: how "
                  "far that reference moved between the rotations that timed it, the machine's own noise; vs your "
                  "script: the same against a plain PyTorch process, as a script of yours runs the model, timed in "
                  "turn with the end-to-end job's):",
                  *_table(rows)]
    if last and not last.get("workloads"):
        lines += ["", "Coverage loop: no workload to cover (none was extracted; see the failures below)."]
    elif last:
        target = last.get("target")
        outcome = "target met" if not last.get("below_target") and not last.get("above_target") else "target NOT met"
        lines += ["", f"Coverage loop: {outcome} (target: coverage within {target:g}..{2 - target:g} for every "
                      f"workload) after {len(loop)} iteration(s), {len(last.get('profiled_op_types', []))} operator "
                      f"types profiled; stopped: {last.get('stop_reason', 'unknown')}."]
        for key, what in (("below_target", "below target"), ("above_target", "sum overshoots")):
            if last.get(key):
                lines.append(f"  {what}: {', '.join(last[key])}")
        if last.get("within_noise"):
            lines.append("  met within the reference's noise (the target met against one of the times the reference "
                         "took in its rotations): " + ", ".join(f"{w} (moved {s:.0%})" for w, s in
                                                            last["within_noise"].items()))
    lines += _unseen_lines(unseen) + _generate_lines(generate) + _tier_lines(tier_costs)
    facts = facts or {}
    if facts.get("measured"):
        lines += ["", "Measured (UTC): " + "; ".join(f"{what} {a} to {b}" for what, (a, b) in
                                                     facts["measured"].items())]
    if facts.get("process"):
        from opcost.measure.plain import CONDITIONS

        lines += ["", f"Costs hold in opcost's measuring process ({facts['process']})."]
        if facts.get("plain"):
            gaps = [f"{w} {g * 100:+.1f}%" for w, g in facts["plain"].items()]
            lines.append(f"A plain PyTorch process ({CONDITIONS}) took, against it (blocks of iterations timed in "
                         f"turn): {', '.join(gaps)}.")
        if facts.get("faults"):
            paid = [f"{w} {s * 1e3:.3g} ms" for w, s in facts["faults"].items()]
            lines.append(f"Its page faults beyond opcost's process (fresh pages of large activations) cost it about, "
                         f"per iteration: {', '.join(paid)}.")
    lines += ["", "Failures: " + failure_text(failures)]
    lines += ["", f"Figures: {figures_dir}/ (open breakdown.png first); tables: results/validation/, database: "
                  f"results/db/; HTML report: {rerun.report_command()}"]
    return "\n".join(lines) + "\n"
