"""Where should each tensor live? The placement of a workload's tensors on a fast and a slow memory tier that
minimises its predicted iteration time with the fast-tier bytes within a budget (AutoTM's question, ASPLOS'20).

*Placeable tensors* (:mod:`opcost.model.tensors`): each parameter and buffer (with its gradient in training),
grouped by the calls that read it, and the activations as one class, all on the fast tier or all on the slow one, the
way the tier run binds a job's memory. On a GPU the activations stay in device memory (its allocator puts every
output there: :func:`opcost.measure.placement.output_tier`): they *must stay fast*, a budget below them is refused.

*Costs.* All on the fast tier: :func:`opcost.analysis.estimate.predict_workload`'s prediction. A tensor on the slow
tier multiplies the cost of each call reading it by that configuration's measured slowdown (activations, weights or
both there), else its op type's median; parameters never placed (``placement.params: fixed``) are priced per byte
(:mod:`opcost.analysis.prices`); both on the tier without a measurement: the two extras added; a slower placement
measured faster (noise) counts as none. A measured slowdown is exact; an estimated one spans the 10-90% range of
what it is the median of. ``estimated_share``: the share of the plan's operator time whose cost or slowdown is not
measured for its own configuration.

The problem and its solvers: :mod:`opcost.analysis.placement_problem` (an integer program solved exactly, a
greedy and a first-touch baseline). A plan (tensor -> tier) is what a later run needs to apply it; checking it end to
end needs a host with the second tier.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from opcost.analysis.placement_problem import (
    ACTIVATIONS,
    AdviseSettings,
    Group,
    Problem,
    budget_bytes,
    evaluate,
    human,
    nonneg,
    plans,
)
from opcost.errors import OpcostError

# --- the problem from a database ----------------------------------------------------------------------------------

def _tiers(measurements: pd.DataFrame, slower: set, settings: AdviseSettings) -> tuple[str, str]:
    """(fast, slow): the database's fast tier and the slow one of ``settings.tiers``, else its only slower tier, else
    the first of ``settings.prefer`` it holds."""
    from opcost.analysis.tiers import fast_tier

    fast = fast_tier(measurements)
    if fast is None or not slower:
        raise OpcostError("database", "holds no verified placement on a slower memory tier on these conditions "
                                      "(config placement.tiers, on a host that has a second tier): nothing to advise")
    wanted, preferred = settings.tiers, [t for t in settings.prefer if t in slower]
    if wanted:
        if wanted[0] == wanted[1]:
            raise OpcostError(f"--tiers {','.join(wanted)}", "names one tier twice: give the fast tier, then a slower "
                                                             f"one ({fast},{sorted(slower)[0]})")
        if wanted[0] != fast:
            raise OpcostError(f"--tiers {','.join(wanted)}", f"the database's fast tier, which every slowdown is "
                                                             f"relative to, is {fast}")
        if wanted[1] not in slower:
            raise OpcostError(f"--tiers {','.join(wanted)}", f"no placement on {wanted[1]} (slower tiers: "
                                                             f"{', '.join(sorted(slower))})")
        return fast, wanted[1]
    if len(slower) > 1 and not preferred:
        raise OpcostError("database", f"holds several slower tiers ({', '.join(sorted(slower))}): choose one with "
                                      f"--tiers {fast},{sorted(slower)[0]}")
    return fast, preferred[0] if preferred else next(iter(slower))


def _placed(db: dict, settings: AdviseSettings) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """(the isolated baseline rows of the conditions, :func:`opcost.analysis.tiers.scenarios` on the slow tier, the
    fast tier, the slow tier) of the database on the conditions of ``settings``."""
    from opcost.analysis.estimate import conditions
    from opcost.analysis.tiers import scenarios

    used, picked = conditions(db["measurements"], **settings.conditions)
    meas = db["measurements"]
    for k, v in picked.items():
        meas = meas[meas[k].astype(str) == str(v)]
    sc = scenarios(meas)
    fast, slow = _tiers(meas, set(sc["tier"]), settings)
    return used, sc[sc["tier"] == slow], fast, slow


def build_problem(db: dict, layers: pd.DataFrame, module, settings: AdviseSettings = AdviseSettings()) -> Problem:
    """The placement problem of the workload of ``layers`` (its model built as ``module``, for its tensors) on the
    tiers of ``settings`` from the database ``db`` (see the module docstring)."""
    from opcost.analysis.estimate import predict_workload
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.analysis.prices import byte_price, byte_prices, lookup_share, slowdowns
    from opcost.measure.engine import ENGINE_OP_TYPE
    from opcost.model.tensors import activation_bytes, param_groups

    used, sc, fast, slow = _placed(db, settings)  # before anything costly: a host with one tier stops here
    pred = predict_workload(db, layers, settings.db_dir, settings.statistic, **settings.conditions)
    rows = pred.layers[pred.layers["op_type"] != ENGINE_OP_TYPE].reset_index(drop=True)
    act = slowdowns(rows, sc[sc["scenario"] == "activations"])
    wts = slowdowns(rows, sc[(sc["scenario"] == "weights") & sc["params"].astype(bool)])
    both = slowdowns(rows, sc[(sc["scenario"] == "all") & sc["params"].astype(bool)])
    col = STATISTICS[settings.statistic or DEFAULT_STATISTIC]
    base = used.drop_duplicates(["config_id", "phase"], keep="last").set_index(["config_id", "phase"])[col]
    rates = byte_prices(sc[sc["scenario"] == "activations"], pd.concat([db["layers"], layers]), base, slow)
    params, shares = param_groups(module, layers)
    groups = [Group(ACTIVATIONS, (ACTIVATIONS,), activation_bytes(layers), 0)] + [
        Group(g.name, g.tensors, g.bytes, g.first_use) for g in params]
    n = len(groups)
    lin, inter, lin_est, inter_est = np.zeros((3, n)), np.zeros((3, n)), np.zeros(n), np.zeros(n)
    unpriced, notes = set(), []
    for i, r in enumerate(rows.itertuples()):
        count, cost, est = float(r.count), float(r.cost_s), r.method != "measured"
        a = act.iloc[i]
        if not np.isfinite(a["mid"]):
            unpriced.add(0)
        e_a = nonneg([cost * (a[q] - 1) if np.isfinite(a[q]) else 0.0 for q in ("mid", "low", "high")])
        lin[:, 0] += count * e_a
        lin_est[0] += count * e_a[0] if est or not a["own"] else 0.0
        paths = json.loads(r.module_paths) if isinstance(r.module_paths, str) else []
        calls = [(r.config_id, p) for p in paths if (r.config_id, p) in shares]
        w, al = wts.iloc[i], both.iloc[i]
        lookups = lookup_share(r)
        for call in calls:
            total, held = shares[call][0] * lookups, {g + 1: v for g, v in shares[call][1].items()}
            if np.isfinite(w["mid"]):
                e_w = nonneg([cost * (w[q] - 1) for q in ("mid", "low", "high")])
            elif (rate := byte_price(rates, r.op_type, r.phase, total)) is not None:
                e_w = nonneg([x * total for x in rate])
            else:
                unpriced.update(held)
                continue
            e_aw = (np.array([cost * (al[q] - 1) for q in ("mid", "low", "high")]) if np.isfinite(al["mid"])
                    else e_a + e_w)
            e_aw = np.maximum(e_aw, np.maximum(e_a, e_w))
            m = count / len(paths)
            for g, share in held.items():
                lin[:, g] += m * e_w * share
                inter[:, g] += m * (e_aw - e_a - e_w) * share
                lin_est[g] += m * e_w[0] * share if est or not w["own"] else 0.0
                inter_est[g] += m * (e_aw - e_a - e_w)[0] * share if est or not al["own"] else 0.0
    device = str(pred.conditions.get("device", ""))
    if device.startswith("cuda"):
        groups[0].pinned = True
        notes.append(f"the activations must stay in {fast} on {device}: the GPU allocator puts every output in "
                     "device memory")
    for g in sorted(unpriced):
        groups[g].pinned = True
    if unpriced:
        notes.append(f"{len(unpriced)} group(s) must stay on {fast}: the database prices no placement of theirs on "
                     f"{slow} ({', '.join(groups[g].name for g in sorted(unpriced)[:3])})")
    free = [g for k, g in enumerate(groups) if k and not g.pinned and not lin[:, k].any() and g.bytes]
    if free:
        notes.append(f"{human(sum(g.bytes for g in free))} of tensors ({len(free)} groups) cost nothing on {slow}: no "
                     "recorded call reads them, or none measured slower")
    ops = float(pred.predicted_s - pred.overhead_s)
    estimated = rows[rows["method"] != "measured"]
    est_ops = float((estimated["count"].astype(float) * estimated["cost_s"]).sum())
    conds = {k: int(v) if k == "threads" and str(v).isdigit() else v for k, v in pred.conditions.items()}
    workload = {"model": pred.model, "batch": int(pred.batch), "mode": pred.mode, **conds,
                "statistic": settings.statistic or DEFAULT_STATISTIC}
    return Problem(workload, fast, slow, groups, (pred.predicted_s, pred.low_s, pred.high_s), ops, est_ops,
                   lin, inter, lin_est, inter_est, notes)


# --- the advice of one workload: plans per budget, the curve, the plan file ---------------------------------------

def for_workload(db: dict, workload: tuple[str, int, str], spec: dict | None = None, dtype: str | None = None,
                 settings: AdviseSettings = AdviseSettings(), check: bool = False) -> Problem:
    """The placement problem of a workload (model, batch, mode): its layers from the database, else extracted now
    (:func:`opcost.analysis.estimate.workload_layers`; with ``check``, a user's own entry, the database's are
    checked against it), its tensors from the model built on the CPU (``spec``: its config entry, in ``dtype``)."""
    from opcost.analysis.estimate import workload_layers
    from opcost.model.sources import load_model

    model, batch, mode = workload
    _placed(db, settings)  # a database without a slower tier is said before the model is built
    layers = workload_layers(db, model, int(batch), mode, spec, (dtype or "float32") if check else None)
    try:
        module = load_model(model, spec or {}, "cpu", dtype or "float32").module
    except OpcostError as e:
        if spec or db["layers"]["model"].ne(model).all():
            raise
        raise OpcostError(f"model {model}", "advise builds the model to see its tensors, and the database does not "
                                            "say how: give --config with the config file of the run that profiled "
                                            "it") from e
    return build_problem(db, layers, module, settings)


def advise(problem: Problem, budgets, settings: AdviseSettings = AdviseSettings(), curve_points: int = 11) -> dict:
    """The plan file's document: the workload, its footprint, and per budget (a config's share or size; one that
    cannot be met is recorded with why) the three methods' plans; ``curve``: the predicted slowdown of each method
    at ``curve_points`` shares of the placeable footprint, 0 to 1 (for the figure)."""
    fast_all = evaluate(problem, np.zeros(len(problem.groups), dtype=bool), "all_fast")
    slow_all = evaluate(problem, ~problem.pinned, "all_slow", problem.must_stay_fast)
    doc = {**problem.workload, "fast": problem.fast, "slow": problem.slow, "footprint_bytes": problem.footprint,
           "must_stay_fast_bytes": problem.must_stay_fast, "groups": len(problem.groups),
           "all_fast_s": float(fast_all.predicted_s), "all_slow_s": float(slow_all.predicted_s),
           "all_slow_slowdown": float(slow_all.slowdown[0]), "notes": list(problem.notes), "budgets": [],
           "curve": []}
    for spec in budgets:
        try:
            size = budget_bytes(spec, problem)
        except OpcostError as e:
            doc["budgets"].append({"budget": spec, "error": str(e)})
            continue
        doc["budgets"].append({"budget": spec, "budget_bytes": size,
                               **{m: p.as_dict(problem) for m, p in plans(problem, size, settings).items()}})
    for share in np.linspace(0, 1, curve_points):
        size = budget_bytes(float(share), problem)
        doc["curve"].append({"share": float(share), "budget_bytes": size,
                             **{m: p.as_dict(problem, with_plan=False) for m, p in
                                plans(problem, size, settings).items()}})
    return doc


def advise_all(config: dict, db: dict, db_dir, outputs: dict) -> list[dict]:
    """The advise stage: per workload ((model, mode, batch) -> plan file path), the plans of the config's budgets
    (``advise.budgets``) between its fast tier and the first slower tier of ``placement.tiers`` the database holds
    placements on; a workload that cannot be advised (one tier only, a model that fails) gets a plan file saying
    why (``skipped``), each reason logged once. Nothing is measured."""
    import logging

    log = logging.getLogger("opcost")
    settings = AdviseSettings(prefer=tuple(config["placement"]["tiers"]), statistic=config["statistic"],
                              conditions={"device": config["device"]}, db_dir=db_dir)
    docs, said = [], set()
    for (model, mode, batch), path in outputs.items():
        try:
            problem = for_workload(db, (model, int(batch), mode), config["models"].get(model) or {}, config["dtype"],
                                   settings)
            doc = advise(problem, config["advise"]["budgets"], settings)
            doc["tiers"] = {t: config["placement"]["tiers"].get(t) for t in (problem.fast, problem.slow)}  # to apply
            best = [f"{b['budget']}: {b['optimiser']['predicted_slowdown']:.3f}x" for b in doc["budgets"]
                    if "optimiser" in b]
            log.info("%s %s b%s on %s + %s: slowdown per budget %s (all on %s: %.3fx)", model, mode, batch,
                     problem.fast, problem.slow, ", ".join(best) or "none reachable", problem.slow,
                     doc["all_slow_slowdown"])
        except Exception as e:  # the stage goes on with the other workloads
            why = str(e) if isinstance(e, OpcostError) else f"{type(e).__name__}: {e}".splitlines()[0]
            doc = {"model": model, "batch": int(batch), "mode": mode, "skipped": why, "budgets": [], "curve": []}
            if why not in said:
                log.warning("advise %s %s b%s: no plan: %s", model, mode, batch, why)
                said.add(why)
        write_advice(doc, path)
        docs.append(doc)
    return docs


def write_advice(doc: dict, path) -> None:
    import yaml

    from opcost import io

    io.write_text("# opcost advise: where each tensor should live under a fast-memory budget (see "
                  "opcost.analysis.advise)\n" + yaml.safe_dump(doc, sort_keys=False, width=120), path)


def read_advice(path) -> dict:
    from pathlib import Path

    import yaml

    return yaml.safe_load(Path(path).read_text())
