"""The whole model on each memory tier: what a workload's iteration would cost with its tensors on a slower tier,
from the isolated placement measurements (`measurements` rows whose placement names tiers).

A *scenario* (:data:`SCENARIOS`) says which tensors are on the slower tier T: the operators' inputs and outputs
(`activations`), the parameters and buffers (`weights`), or every tensor (`all`). Each configuration and phase
measured under placements has, per tier and scenario, a *slowdown*: the time of the placement that realises the
scenario (:func:`scenario_of`; on GPUs, whose allocator keeps outputs in device memory, with its outputs on the fast
tier) over the time of its all-on-the-fast-tier placement, both measured in the same visits (back to back) and with
the location of every tensor verified (rows whose check failed are left out). Which scenarios a database answers
follows from the placements its config measured: `placement.params: fixed` (the default) keeps parameters on the
fast tier, so `activations` only; `vary` places them too, so `all`, and `weights` where `placement.max_per_config`
reaches the placement with only the parameters moved. A workload's time in a scenario is

    Σ count × (forward cost × its forward slowdown + backward cost × its backward slowdown)

with the costs of the validated `isolated` prediction (:func:`opcost.analysis.predict.costed_layers`: the
all-fast-tier costs measured in rotation) and the autograd engine's fixed cost unchanged (CPU work, no tensor); with
`weights`, a configuration without parameters is unchanged too. A configuration and phase without its own slowdown
takes the median slowdown of its op type and phase in the scenario, else of every configuration of the phase;
``measured_share`` is the share of the all-fast time whose slowdown was measured (or that the scenario does not
move). The model's Python between operators is left out, as in the `isolated` prediction: it does not touch the
placed tensors. ``opcost predict --tier [--scenario]`` applies the same factors (:func:`slowdown_factors`) to any
model's prediction (:func:`opcost.analysis.estimate.predict_workload`).

On a CPU NUMA tier the prediction is checked end to end (the `e2e` rows of method `tier`: the workload timed with
its job's memory bound to T, parameters on the fast tier unless ``placement.params: vary``, i.e. `activations` or
`all`): ``error`` compares the predicted slowdown with the measured one, the tier run over the workload's `dedicated`
run on the fast tier. GPU tiers have no such check: the device allocator puts a model's activations in device
memory.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from opcost.analysis.predict import costed_layers
from opcost.measure.engine import ENGINE_OP_TYPE
from opcost.measure.placement import Placement
from opcost.tables import DEFAULT_STATISTIC, STATISTICS, TIER_COSTS, frame


def placement_class(placement: str, fast: str | None = None) -> str:
    """A placement reduced to which tier each tensor role is on (inputs: one tier, or `mixed`), so that
    configurations with different input counts share a column: ``in:pmem w:dram out:dram``; parameters on the
    ``fast`` tier are left out, so configurations with and without parameters share columns too."""
    p = Placement.parse(placement)
    ins = sorted(set(p.inputs))
    parts = [f"in:{ins[0] if len(ins) == 1 else 'mixed'}"] if ins else []
    return " ".join(parts + ([f"w:{p.params}"] if p.params and p.params != fast else []) + [f"out:{p.out}"])


def fast_tier(measurements: pd.DataFrame) -> str | None:
    """The fast tier of the database's placement measurements (where their baseline rows put every tensor), or
    None when it holds none."""
    m = measurements[(measurements["placement"] != "default") & measurements["baseline"].fillna(False).astype(bool)]
    return Placement.parse(m["placement"].iloc[0]).out if len(m) else None


def verified(rows: pd.DataFrame) -> pd.Series:
    """Whether each placement row had every tensor where it was asked to be: its own check (`placement_ok`), or
    for a backward row, which is not checked itself, the check of the forward row of the same configuration and
    placement (the same tensors, placed once for both phases)."""
    own = rows["placement_ok"].astype("boolean")
    fwd = rows[rows["phase"] == "forward"].dropna(subset=["placement_ok"])
    checked = fwd.groupby(["config_id", "placement"])["placement_ok"].all()
    key = pd.MultiIndex.from_arrays([rows["config_id"], rows["placement"]])
    forward = pd.Series(checked.reindex(key).to_numpy(), index=rows.index, dtype="boolean")
    return own.fillna(forward.where(rows["phase"] == "backward")).fillna(False).astype(bool)


def placement_slowdowns(measurements: pd.DataFrame) -> pd.DataFrame:
    """Per isolated configuration, phase and placement (its `ok` rows with every tensor where it was asked to be,
    :func:`verified`): median time / the median of the same configuration and phase with every tensor on the fast
    tier (measured in the same visits; 1 where both are 0, none where only the latter is), with the placement's class
    (:func:`placement_class`)."""
    m = measurements[(measurements["source"] == "isolated") & (measurements["status"] == "ok")
                     & (measurements["placement"] != "default")]
    m = m[verified(m)]
    if m.empty:
        return pd.DataFrame(columns=["config_id", "op_type", "phase", "placement", "cls", "slowdown"])
    base = m[m["baseline"].fillna(False)].set_index(["config_id", "phase"])["median_s"]
    base = base[~base.index.duplicated(keep="last")]
    keys = list(zip(m["config_id"], m["phase"]))
    ref = pd.Series([base.get(k, np.nan) for k in keys], index=m.index, dtype=float)
    fast = fast_tier(measurements)
    t = m["median_s"].astype(float)
    # a backward cost at or below the autograd engine's fixed cost is netted to 0 (opcost.measure.engine): 0 on both
    # tiers is no measurable difference; 0 on the fast tier alone, no ratio
    slowdown = (t / ref.where(ref > 0)).where(~((t == 0) & (ref == 0)), 1.0)
    out = m.assign(slowdown=slowdown, cls=m["placement"].map(lambda p: placement_class(p, fast)))
    return out.dropna(subset=["slowdown"])[["config_id", "op_type", "phase", "placement", "cls", "slowdown"]]


SCENARIOS = {  # what is on the slower tier T in each scenario: scenario -> meaning
    "activations": "the operators' inputs and outputs on T, parameters and buffers on the fast tier",
    "weights": "parameters and buffers on T, the operators' inputs and outputs on the fast tier",
    "all": "every tensor on T",
}


def slow_tier(p: Placement, fast: str) -> str | None:
    """The one slower tier a placement puts tensors on (the others on the fast tier), or None."""
    slow = set(p.tiers()) - {fast}
    return slow.pop() if len(slow) == 1 else None


def scenario_of(p: Placement, fast: str, outputs_move: bool = True) -> str | None:
    """The scenario of :data:`SCENARIOS` a placement on the fast tier and one slower tier T (:func:`slow_tier`)
    realises, or None (a mix no scenario describes). ``outputs_move``: whether outputs were placed on T at all; where
    they were not (GPUs, whose allocator keeps them in device memory), a scenario's outputs stay on the fast tier."""
    tier = slow_tier(p, fast)
    if tier is None:
        return None
    ins = set(p.inputs)
    out_ok = p.out == tier or (not outputs_move and p.out == fast)
    if p.params == tier:
        if ins <= {fast} and p.out == fast:
            return "weights"
        return "all" if ins <= {tier} and out_ok else None
    return "activations" if ins <= {tier} and out_ok and (ins or p.out == tier) else None


def scenarios(measurements: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, phase, slower tier T and scenario (:data:`SCENARIOS`): the slowdown of the measured
    placement the scenario describes (:func:`scenario_of`), that placement's class, and whether the configuration
    has parameters. A configuration without parameters has the same placement in `activations` and `all`; columns
    config_id, op_type, phase, tier, scenario, cls, slowdown, params."""
    s = placement_slowdowns(measurements)
    fast = fast_tier(measurements)
    cols = ["config_id", "op_type", "phase", "tier", "scenario", "cls", "slowdown", "params"]
    if s.empty or fast is None:
        return pd.DataFrame(columns=cols)
    parsed = s["placement"].map(Placement.parse)
    with_params = set(s.loc[parsed.map(lambda p: p.params is not None), "config_id"])
    tiers = parsed.map(lambda p: slow_tier(p, fast))
    # the configurations whose outputs were placed on a tier (on GPUs only in-place and view operators', whose
    # output is their input's memory)
    moving = {(c, t) for c, p, t in zip(s["config_id"], parsed, tiers) if t is not None and p.out == t}
    found = pd.Series([scenario_of(p, fast, (c, t) in moving) for c, p, t in zip(s["config_id"], parsed, tiers)],
                      index=s.index, dtype=object)
    keep = found.notna()
    s = s[keep].assign(tier=tiers[keep], scenario=found[keep], params=s.loc[keep, "config_id"].isin(with_params))
    s = s.drop_duplicates(["config_id", "phase", "tier", "scenario"], keep="last")
    both = s[(s["scenario"] == "activations") & ~s["params"]].assign(scenario="all")
    return pd.concat([s, both], ignore_index=True)[cols]


def default_scenario(on_tier: pd.DataFrame) -> str:
    """The scenario a slower tier's measurements (:func:`scenarios` rows of one tier) answer best: `all` where
    configurations with parameters were measured with them on the tier (``placement.params: vary``), else
    `activations`."""
    return "all" if (on_tier["params"] & (on_tier["scenario"] == "all")).any() else "activations"


def slowdown_factors(rows: pd.DataFrame, on_tier: pd.DataFrame,
                     unmoved: frozenset | set = frozenset()) -> tuple[np.ndarray, np.ndarray]:
    """(slowdown, whether measured) per row of ``rows`` (columns config_id, phase, op_type) in one scenario on one
    tier, from its :func:`scenarios` rows ``on_tier``: the configuration and phase's own slowdown, else the median
    of its op type and phase, else of its phase (NaN where the phase was never measured on the tier); 1, measured,
    for the autograd engine's row (CPU work, no tensor) and for the configurations of ``unmoved``, none of whose
    tensors the scenario moves (with weights on the tier: those without parameters)."""
    own = on_tier.set_index(["config_id", "phase"])["slowdown"]
    own = own[~own.index.duplicated(keep="last")]
    by_type = on_tier.groupby(["op_type", "phase"])["slowdown"].median()
    by_phase = on_tier.groupby("phase")["slowdown"].median()
    mine = own.reindex(pd.MultiIndex.from_arrays([rows["config_id"], rows["phase"]])).to_numpy(dtype=float)
    typed = by_type.reindex(pd.MultiIndex.from_arrays([rows["op_type"], rows["phase"]])).to_numpy(dtype=float)
    phased = by_phase.reindex(rows["phase"]).to_numpy(dtype=float)
    fixed = (rows["op_type"] == ENGINE_OP_TYPE).to_numpy() | rows["config_id"].isin(unmoved).to_numpy()
    factor = np.where(fixed, 1.0, np.where(np.isfinite(mine), mine, np.where(np.isfinite(typed), typed, phased)))
    return factor, np.isfinite(mine) | fixed


def unmoved(all_scenarios: pd.DataFrame, scenario: str) -> set:
    """The configurations none of whose tensors ``scenario`` moves: with weights on the tier, those measured
    without parameters (:func:`scenarios` ``params``); none otherwise."""
    if scenario != "weights":
        return set()
    return set(all_scenarios.loc[~all_scenarios["params"].astype(bool), "config_id"])


def tier_runs(e2e: pd.DataFrame, device: str, statistic: str = DEFAULT_STATISTIC) -> dict[tuple, dict]:
    """(model, batch, mode, tier, scenario) -> the newest end-to-end run with the job's memory on the tier (`e2e`
    method `tier`; scenario `activations`, or `all` with the parameters there too; a model without parameters
    answers both) on ``device``: ``measured_s`` (its ``statistic``), ``measured_slowdown`` (over the workload's
    newest `dedicated` run on the fast tier) and ``placement_ok``."""
    from opcost.database import latest
    from opcost.measure.profiling import matches_all

    col = STATISTICS[statistic]
    e2e = e2e[(e2e["device"] == device) & e2e[col].notna()]
    base = latest(e2e[(e2e["method"] == "dedicated") & (e2e["placement"] == "default")],
                  ("model", "batch", "mode"))
    fast = {(r.model, int(r.batch), r.mode): float(v) for r, v in zip(base.itertuples(), base[col])}
    runs = e2e[e2e["method"] == "tier"]
    runs = latest(runs.assign(tier=runs["placement"].map(lambda p: Placement.parse(p).out)),
                  ("model", "batch", "mode", "tier", "placement"))
    out = {}
    for r, v in zip(runs.itertuples(), runs[col]):
        key = (r.model, int(r.batch), r.mode)
        p = Placement.parse(r.placement)
        ok = isinstance(r.placement_verified, str) and matches_all(r.placement, r.placement_verified)
        run = {"measured_s": float(v), "placement_ok": ok,
               "measured_slowdown": float(v) / fast[key] if fast.get(key) else None}
        answers = ("activations", "all") if p.params is None else ("all",) if p.params == p.out else ("activations",)
        out.update({(*key, r.tier, sc): run for sc in answers})
    return out


def whole_model(layers: pd.DataFrame, measurements: pd.DataFrame, device: str,
                statistic: str = DEFAULT_STATISTIC, e2e: pd.DataFrame | None = None) -> pd.DataFrame:
    """One `tier_costs` row per workload of ``layers``, slower tier and scenario that its placement measurements on
    ``device`` answer (see the module docstring; `all` only where parameters were placed on the tier, i.e. with
    ``placement.params: vary``), with its end-to-end check where ``e2e`` holds a `tier` run; empty without
    placement measurements."""
    runs = tier_runs(e2e, device, statistic) if e2e is not None and len(e2e) else {}
    dev = measurements[measurements["device"] == device]
    slow = scenarios(dev)
    if slow.empty:
        return frame(TIER_COSTS, [])
    costed = costed_layers(layers, dev, device, "isolated", statistic)
    costed = costed[costed["cost_s"].notna()]
    backward = costed["backward_s"].fillna(0.0) if "backward_s" in costed else 0.0
    parts = pd.concat([costed.assign(phase="forward", base_s=costed["cost_s"] - backward),
                       costed.assign(phase="backward", base_s=backward)], ignore_index=True)
    parts = parts[parts["base_s"] > 0]
    rows = []
    for (tier, scenario), on_t in slow.groupby(["tier", "scenario"], sort=True):
        if scenario == "all" and not on_t["params"].any():  # no parameter was placed: `activations` says it
            continue
        moved = on_t[on_t["params"]] if scenario != "activations" else on_t
        cls = (moved if len(moved) else on_t)["cls"].mode().iloc[0]
        factor, own = slowdown_factors(parts, on_t, unmoved(slow, scenario))
        t = parts.assign(factor=factor, own=own, total=parts["count"].astype(float) * parts["base_s"])
        for (model, batch, mode), g in t.groupby(["model", "batch", "mode"], sort=True):
            if not np.isfinite(g["factor"]).all():  # a phase never measured on this tier
                continue
            base = float(g["total"].sum())
            predicted = float((g["total"] * g["factor"]).sum())
            configs = g[g["op_type"] != ENGINE_OP_TYPE]
            slowdown = predicted / base if base > 0 else None
            run = runs.get((model, int(batch), mode, tier, scenario), {})
            measured = run.get("measured_slowdown")
            rows.append({"model": model, "batch": int(batch), "mode": mode, "device": device, "tier": tier,
                         "scenario": scenario, "placement": cls, "statistic": statistic, "baseline_s": base,
                         "predicted_s": predicted, "slowdown": slowdown,
                         "measured_share": float(g.loc[g["own"], "total"].sum() / base) if base > 0 else None,
                         "configs": int(configs["config_id"].nunique()),
                         "configs_measured": int(configs.groupby("config_id")["own"].all().sum()),
                         "measured_s": run.get("measured_s"), "measured_slowdown": measured,
                         "error": slowdown / measured - 1 if measured and slowdown is not None else None,
                         "placement_ok": run.get("placement_ok")})
    return frame(TIER_COSTS, rows)
