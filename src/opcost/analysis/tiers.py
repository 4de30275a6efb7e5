"""The whole model on each memory tier: what a workload's iteration would cost with its tensors on a slower tier,
from the isolated placement measurements (`measurements` rows whose placement names tiers).

Each configuration and phase measured under placements has, per slower tier T, a *slowdown*: the time of its
all-on-T placement (of the placements measured, the one with the most tensors on T and the rest on the fast tier:
inputs and outputs on T, parameters too with ``placement.params: vary``; on GPUs outputs stay in device memory)
over the time of its all-on-the-fast-tier placement, both measured in the same visits (back to back) and with the
location of every tensor verified (rows whose check failed are left out). A workload's time on T is

    Σ count × (forward cost × its forward slowdown + backward cost × its backward slowdown)

with the costs of the validated `isolated` prediction (:func:`opcost.analysis.predict.costed_layers`: the
all-fast-tier costs measured in rotation) and the autograd engine's fixed cost unchanged (CPU work, no tensor).
A configuration and phase without its own slowdown on T (its placement failed or was not measured) takes the
median slowdown of its op type and phase on T, else of every configuration of the phase on T; ``measured_share``
is the share of the all-fast time whose slowdown was measured. The model's Python between operators is left out,
as in the `isolated` prediction: it does not touch the placed tensors. ``opcost predict --tier`` applies the same
factors (:func:`slowdown_factors`) to any model's prediction (:func:`opcost.analysis.estimate.predict_workload`).

On a CPU NUMA tier the prediction is checked end to end (the `e2e` rows of method `tier`: the workload timed with
its job's memory bound to T, parameters on the fast tier unless ``placement.params: vary``): ``error`` compares the
predicted slowdown with the measured one, the tier run over the workload's `dedicated` run on the fast tier. GPU
tiers have no such check: the device allocator puts a model's activations in device memory.
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
    tier (measured in the same visits), with the placement's class (:func:`placement_class`)."""
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
    out = m.assign(slowdown=m["median_s"].astype(float) / ref,
                   cls=m["placement"].map(lambda p: placement_class(p, fast)))
    return out.dropna(subset=["slowdown"])[["config_id", "op_type", "phase", "placement", "cls", "slowdown"]]


def all_on(measurements: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, phase and slower tier T: the slowdown of its all-on-T placement (see the module
    docstring) and that placement's class; columns config_id, op_type, phase, tier, cls, slowdown."""
    s = placement_slowdowns(measurements)
    fast = fast_tier(measurements)
    cols = ["config_id", "op_type", "phase", "tier", "cls", "slowdown"]
    if s.empty or fast is None:
        return pd.DataFrame(columns=cols)
    placed = s["placement"].map(lambda p: Placement.parse(p).tiers())
    slow = placed.map(lambda ts: {t for t in ts if t != fast})
    one = slow.map(len) == 1  # every tensor on the fast tier or on one slower tier
    s = s[one].assign(tier=slow[one].map(lambda ts: next(iter(ts))))
    s = s.assign(on_tier=[ts.count(t) for ts, t in zip(placed[one], s["tier"])])
    s = s.sort_values("on_tier").drop_duplicates(["config_id", "phase", "tier"], keep="last")
    return s[cols].reset_index(drop=True)


def slowdown_factors(rows: pd.DataFrame, on_tier: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(slowdown, whether measured) per row of ``rows`` (columns config_id, phase, op_type) on one tier, from that
    tier's :func:`all_on` rows ``on_tier``: the configuration and phase's own slowdown, else the median of its op type
    and phase, else of its phase (NaN where the phase was never measured on the tier); 1, measured, for the autograd
    engine's row (CPU work, no tensor)."""
    own = on_tier.set_index(["config_id", "phase"])["slowdown"]
    own = own[~own.index.duplicated(keep="last")]
    by_type = on_tier.groupby(["op_type", "phase"])["slowdown"].median()
    by_phase = on_tier.groupby("phase")["slowdown"].median()
    mine = own.reindex(pd.MultiIndex.from_arrays([rows["config_id"], rows["phase"]])).to_numpy(dtype=float)
    typed = by_type.reindex(pd.MultiIndex.from_arrays([rows["op_type"], rows["phase"]])).to_numpy(dtype=float)
    phased = by_phase.reindex(rows["phase"]).to_numpy(dtype=float)
    engine = (rows["op_type"] == ENGINE_OP_TYPE).to_numpy()
    factor = np.where(engine, 1.0, np.where(np.isfinite(mine), mine, np.where(np.isfinite(typed), typed, phased)))
    return factor, np.isfinite(mine) | engine


def tier_runs(e2e: pd.DataFrame, device: str, statistic: str = DEFAULT_STATISTIC) -> dict[tuple, dict]:
    """(model, batch, mode, tier) -> the newest end-to-end run with the job's memory on the tier (`e2e` method
    `tier`) on ``device``: ``measured_s`` (its ``statistic``), ``measured_slowdown`` (over the workload's newest
    `dedicated` run on the fast tier) and ``placement_ok``."""
    from opcost.database import latest
    from opcost.measure.profile import matches_all

    col = STATISTICS[statistic]
    e2e = e2e[(e2e["device"] == device) & e2e[col].notna()]
    base = latest(e2e[(e2e["method"] == "dedicated") & (e2e["placement"] == "default")],
                  ("model", "batch", "mode"))
    fast = {(r.model, int(r.batch), r.mode): float(v) for r, v in zip(base.itertuples(), base[col])}
    runs = e2e[e2e["method"] == "tier"]
    runs = runs.assign(tier=runs["placement"].map(lambda p: Placement.parse(p).out))
    out = {}
    for r, v in zip(latest(runs, ("model", "batch", "mode", "tier")).itertuples(),
                    latest(runs, ("model", "batch", "mode", "tier"))[col]):
        key = (r.model, int(r.batch), r.mode)
        ok = isinstance(r.placement_verified, str) and matches_all(r.placement, r.placement_verified)
        out[(*key, r.tier)] = {"measured_s": float(v), "placement_ok": ok,
                               "measured_slowdown": float(v) / fast[key] if fast.get(key) else None}
    return out


def whole_model(layers: pd.DataFrame, measurements: pd.DataFrame, device: str,
                statistic: str = DEFAULT_STATISTIC, e2e: pd.DataFrame | None = None) -> pd.DataFrame:
    """One `tier_costs` row per workload of ``layers`` and slower tier that its placement measurements on
    ``device`` cover (see the module docstring), with its end-to-end check where ``e2e`` holds a `tier` run; empty
    without placement measurements."""
    runs = tier_runs(e2e, device, statistic) if e2e is not None and len(e2e) else {}
    dev = measurements[measurements["device"] == device]
    slow = all_on(dev)
    if slow.empty:
        return frame(TIER_COSTS, [])
    costed = costed_layers(layers, dev, device, "isolated", statistic)
    costed = costed[costed["cost_s"].notna()]
    backward = costed["backward_s"].fillna(0.0) if "backward_s" in costed else 0.0
    parts = pd.concat([costed.assign(phase="forward", base_s=costed["cost_s"] - backward),
                       costed.assign(phase="backward", base_s=backward)], ignore_index=True)
    parts = parts[parts["base_s"] > 0]
    rows = []
    for tier, on_t in slow.groupby("tier", sort=True):
        cls = on_t["cls"].mode().iloc[0]
        factor, own = slowdown_factors(parts, on_t)
        t = parts.assign(factor=factor, own=own, total=parts["count"].astype(float) * parts["base_s"])
        for (model, batch, mode), g in t.groupby(["model", "batch", "mode"], sort=True):
            if not np.isfinite(g["factor"]).all():  # a phase never measured on this tier
                continue
            base = float(g["total"].sum())
            predicted = float((g["total"] * g["factor"]).sum())
            configs = g[g["op_type"] != ENGINE_OP_TYPE]
            slowdown = predicted / base if base > 0 else None
            run = runs.get((model, int(batch), mode, tier), {})
            measured = run.get("measured_slowdown")
            rows.append({"model": model, "batch": int(batch), "mode": mode, "device": device, "tier": tier,
                         "placement": cls, "statistic": statistic, "baseline_s": base, "predicted_s": predicted,
                         "slowdown": slowdown,
                         "measured_share": float(g.loc[g["own"], "total"].sum() / base) if base > 0 else None,
                         "configs": int(configs["config_id"].nunique()),
                         "configs_measured": int(configs.groupby("config_id")["own"].all().sum()),
                         "measured_s": run.get("measured_s"), "measured_slowdown": measured,
                         "error": slowdown / measured - 1 if measured and slowdown is not None else None,
                         "placement_ok": run.get("placement_ok")})
    return frame(TIER_COSTS, rows)
