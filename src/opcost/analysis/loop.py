"""The coverage loop: profile a few operator types, compare with whole models, add the types that matter.

Iteration ``n`` has a set of profiled operator types. For each workload, *coverage* is the fraction of its measured
end-to-end time that Σ count × isolated cost over configurations of profiled types accounts for, plus the CPU
overhead its trace models between operators (:func:`opcost.analysis.predict.trace_overhead`, where the workload has
a trace and config ``loop.overhead`` is on: Python glue no operator type can account for, a sizeable share of small
models' iterations; docs/methodology.md, section 7). Where an energy meter exists, ``energy_coverage`` is the same
for joules, operators only; the stopping rule uses time. A workload meets the target when ``target`` <= coverage <=
``2 - target`` (the same tolerance both ways: a sum that overshoots the measured time is an error, not coverage). It
is below target while coverage < ``target``; above it, its sum overshoots, which no further operator type can mend.
A sum that misses the target against the pooled reference but meets it against one of the times the reference took
in the rotations that timed it (:func:`opcost.analysis.predict.reference_range`: the pooled reference sits somewhere
between them) is within the reference's noise: the workload counts as met, and is named with how far its reference
moved (``within_noise``), not as a failure (a sub-millisecond model whose reference moved 28% between rotations
cannot check a 10% target). The next iteration adds the ``add_per_iteration`` unprofiled types with the largest
*unattributed time* (Σ count × in-situ cost, which exists for every configuration of every workload after one
in-situ pass) summed over the workloads still below target. The loop stops when no workload is below target (every
one met it, or some overshoot: said in the stop reason), when no unprofiled type is left, or at ``max_iterations``;
the profiled types are then the significant operator list, written as a config fragment a next run can start from.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from opcost.analysis.predict import DEFAULT_STATISTIC, costed_layers, reference_range, references
from opcost.database import of_workload
from opcost.measure.engine import ENGINE_OP_TYPE

ALL = "all"


@dataclass(frozen=True)
class LoopSettings:
    """Config `loop`; the defaults are the schema's (a test holds them equal)."""
    initial_op_types: tuple = ("Conv2d", "Linear", "linear")
    target: float = 0.9
    max_iterations: int = 8
    add_per_iteration: int = 4
    overhead: bool = True  # count the trace-modelled overhead between operators as attributed

    @classmethod
    def from_config(cls, cfg: dict) -> "LoopSettings":
        return cls(tuple(cfg.get("initial_op_types", cls.initial_op_types) or ()),
                   float(cfg.get("target", cls.target)), int(cfg.get("max_iterations", cls.max_iterations)),
                   int(cfg.get("add_per_iteration", cls.add_per_iteration)), bool(cfg.get("overhead", cls.overhead)))


def op_types_for(iteration: int, settings: LoopSettings, all_types: list[str], previous: dict | None) -> list[str]:
    """The operator types profiled up to and including ``iteration``."""
    if iteration == 0:
        initial = [t for t in settings.initial_op_types if t != ALL]
        if not initial or ALL in settings.initial_op_types:
            return sorted(all_types)
        return [t for t in initial if t in all_types]
    return list(previous["profiled_op_types"]) + list(previous["next_op_types"])


def new_op_types(iteration: int, settings: LoopSettings, all_types: list[str], previous: dict | None) -> list[str]:
    """The types iteration ``iteration`` adds (and profiles); earlier types are never profiled again."""
    return list(previous["next_op_types"]) if iteration > 0 else op_types_for(0, settings, all_types, None)


def evaluate(iteration: int, profiled: list[str], layers: pd.DataFrame, measurements: pd.DataFrame,
             e2e: pd.DataFrame, settings: LoopSettings, device: str, overhead: dict | None = None,
             statistic: str = DEFAULT_STATISTIC) -> dict:
    """The checkpoint's decision for ``iteration`` (JSON-able); ``overhead``: (model, batch, mode) -> modelled
    overhead seconds per iteration (:func:`opcost.analysis.predict.trace_overhead`), counted as attributed;
    ``statistic``: the per-call statistic costs and end-to-end times are compared in (config `statistic`)."""
    # coverage uses isolated costs: the same end-to-end reference as their prediction
    # (opcost.analysis.predict.references)
    measured = {k: v for k, (v, _) in references(e2e, device, "isolated", statistic).items()}
    ranges = reference_range(e2e, device, statistic)
    e2e = e2e[e2e["method"] == "dedicated"]  # energy: the runs that meter it
    iso = costed_layers(layers, measurements, device, "isolated", statistic)
    ins = costed_layers(layers, measurements, device, "insitu", statistic)
    measured_j = {(r.model, int(r.batch), r.mode): r.energy_j for r in e2e.itertuples()
                  if r.device == device and pd.notna(r.energy_j)}
    all_types = sorted(set(layers["op_type"]))
    workloads, below, over, noise = [], [], [], {}
    for (model, batch, mode), g in iso.groupby(["model", "batch", "mode"], sort=True):
        m = measured.get((model, int(batch), mode))
        in_profiled = g["op_type"].isin(profiled) | (g["op_type"] == ENGINE_OP_TYPE)  # the engine: with backward
        ov = (overhead or {}).get((model, int(batch), mode)) if settings.overhead else None
        attributed = float(g.loc[in_profiled & g["cost_s"].notna(), "total_s"].sum()) + (ov or 0.0)
        all_measured = bool(g["cost_s"].notna().all())
        gi = of_workload(ins, model, batch, mode)
        mj = measured_j.get((model, int(batch), mode))
        w = {"model": model, "batch": int(batch), "mode": mode, "measured_s": m, "attributed_s": attributed,
             "overhead_s": ov,
             "coverage": attributed / m if m else None,
             "insitu_coverage": float(gi.loc[gi["op_type"].isin(profiled), "total_s"].sum()) / m if m else None,
             # energy: the same attribution where a meter measured both sides (missing, never 0, elsewhere)
             "energy_coverage": (float(g.loc[in_profiled, "total_j"].sum()) / float(mj)
                                 if mj is not None and g["total_j"].notna().any() else None),
             "error": (float(g["total_s"].sum()) / m - 1) if (m and all_measured) else None,
             "by_op_type": {k: float(v) for k, v in g[in_profiled].groupby("op_type")["total_s"].sum().items()}}
        workloads.append(w)
        key = (model, int(batch), mode)
        if w["coverage"] is not None and not settings.target <= w["coverage"] <= 2 - settings.target and (
                noisy := within_range(attributed, ranges.get(key), settings.target)):
            noise[f"{model}/{mode}/b{batch}"] = noisy
        elif w["coverage"] is None or w["coverage"] < settings.target:
            below.append(key)
        elif w["coverage"] > 2 - settings.target:
            over.append(key)
    remaining = [t for t in all_types if t not in profiled]
    rank = {}
    if below and remaining:
        below_set = set(below)
        in_below = pd.Series([k in below_set for k in zip(ins["model"], ins["batch"].astype(int), ins["mode"])],
                             index=ins.index, dtype=bool)
        sel = ins[in_below & ins["op_type"].isin(remaining)]
        rank = sel.groupby("op_type")["total_s"].sum().sort_values(ascending=False)
        rank = {k: float(v) for k, v in rank.items() if v > 0}
    next_types = list(rank)[: settings.add_per_iteration]
    if not below:
        stop = f"sum overshoots the measured time for {len(over)} workload(s)" if over else "target reached" + (
            f" ({len(noise)} workload(s) within their reference's noise)" if noise else "")
    elif iteration + 1 >= settings.max_iterations:
        stop = "max iterations"
    elif not next_types:
        stop = "no unprofiled operator type left"
    else:
        stop = None
    return {"iteration": iteration, "target": settings.target, "profiled_op_types": list(profiled),
            "significant_op_types": significant(workloads, settings.target),
            "workloads": workloads, "below_target": [f"{m}/{mo}/b{b}" for m, b, mo in below],
            "above_target": [f"{m}/{mo}/b{b}" for m, b, mo in over], "within_noise": noise,
            "unattributed_by_op_type": rank, "next_op_types": [] if stop else next_types,
            "done": stop is not None, "stop_reason": stop}


def within_range(attributed: float, times: tuple[float, float] | None, target: float) -> float | None:
    """How far the reference moved between its rotations (largest / smallest − 1) where the sum ``attributed`` meets
    ``target`` against at least one time the reference took (``times``: the smallest and the largest, as
    :func:`opcost.analysis.predict.reference_range` gives them), else None."""
    if times is None:
        return None
    lo, hi = times
    return hi / lo - 1 if attributed / hi <= 2 - target and attributed / lo >= target else None


def significant(workloads: list[dict], target: float) -> list[str]:
    """One global list: per workload, the fewest profiled types (largest attributed time first) whose time, with the
    modelled overhead, reaches the target (all of them when the target is not reached), united over workloads,
    largest total first."""
    chosen: dict[str, float] = {}
    for w in workloads:
        acc = w.get("overhead_s") or 0.0
        for op_type, t in sorted(w["by_op_type"].items(), key=lambda kv: -kv[1]):
            chosen[op_type] = chosen.get(op_type, 0.0) + t
            acc += t
            if w["measured_s"] and acc >= target * w["measured_s"]:
                break
    return sorted(chosen, key=lambda k: -chosen[k])


def summary_text(evaluations: list[dict]) -> str:
    last = evaluations[-1]
    target = last["target"]
    lines = [f"coverage loop: {len(evaluations)} iteration(s), stopped: {last['stop_reason']} "
             f"(target {target:.0%}{f' to {2 - target:.0%}' if target < 1 else ''})"]
    for w in last["workloads"]:
        cov = "n/a" if w["coverage"] is None else f"{w['coverage']:.1%}"
        if w["coverage"] is not None and w["coverage"] > 2 - target:
            cov += f", the sum overshoots the measured time by {w['coverage'] - 1:.1%}"
        if w.get("overhead_s") is not None and w["measured_s"]:
            cov += f" (overhead {w['overhead_s'] / w['measured_s']:+.1%})"
        err = "n/a" if w["error"] is None else f"{w['error']:+.1%}"
        lines.append(f"  {w['model']} {w['mode']} b{w['batch']}: coverage {cov}, error with all types {err}")
    if last.get("within_noise"):
        lines.append("met within the reference's noise: " + ", ".join(
            f"{k} (its reference moved {s:.0%} between rotations)" for k, s in last["within_noise"].items()))
    lines.append(f"profiled operator types: {', '.join(last['profiled_op_types'])}")
    lines.append(f"significant operator types: {', '.join(last['significant_op_types'])}")
    return "\n".join(lines)


def fragment(evaluations: list[dict]) -> dict:
    """Config fragment for a next run: start from the significant operator types found."""
    last = evaluations[-1]
    return {"loop": {"initial_op_types": list(last["significant_op_types"]), "target": last["target"]}}
