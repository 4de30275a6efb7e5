"""Isolated profiling: each operator configuration timed alone, by the timing core, on the configured device."""
from __future__ import annotations

import json
import logging
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from opcost.failures import failure
from opcost.measure.cache import cache_state, cold_pool
from opcost.measure.e2e import e2e_frames
from opcost.measure.energy import NoMeter, missing
from opcost.measure.engine import engine_intercept, engine_probes, net_of_engine
from opcost.measure.hostinfo import host_facts, llc_bytes, now
from opcost.measure.placement import (
    DEFAULT,
    Placement,
    Placer,
    aliased_input,
    matches,
    output_tier,
    plan,
    storages,
    usable_tiers,
)
from opcost.measure.placement import Settings as PlacementSettings
from opcost.measure.rotation import (
    ITERATION_CALLS,
    Member,
    both,
    call_positions,
    first_call,
    lead_in,
    model_order,
    round_timer,
    shuffled,
    with_engine_probes,
    with_iterations,
)
from opcost.measure.timing import ROTATION_STATES, Measurement, RotationError, TimingSettings, measure
from opcost.model.replay import ModelCache, build, mode_context, refresher
from opcost.model.workload import make_workload, parse_workload_key
from opcost.tables import MEASUREMENTS, SAMPLES, frame

log = logging.getLogger(__name__)


def chunk_of(config_id: str, chunks: int) -> int:
    """The profiling chunk a configuration belongs to: stable, independent of which other configs exist."""
    return zlib.crc32(config_id.encode()) % chunks


def measurement_order(configs: pd.DataFrame) -> pd.DataFrame:
    """Configurations in a pseudo-random but stable order (by id hash), so slow drift of the machine spreads over
    all op types instead of biasing the ones measured last."""
    key = configs["config_id"].map(lambda c: zlib.crc32(("order" + c).encode()))
    return configs.assign(_k=key).sort_values("_k").drop(columns="_k")


# the way a configuration is timed; part of the profiling journal's key, so that a run resumed after an upgrade
# that changed it measures again instead of mixing rows of two methods (2: training rounds run the forward pass
# then the backward pass in reverse, with the autograd engine measured in the rotation)
METHOD_VERSION = 2
MAX_ROTATION = 128  # default configurations per rotation (all their replays are alive at once; journaled together)


@dataclass(frozen=True)
class Placing:
    """How a configuration's placements are made: the :class:`opcost.measure.placement.Placer`, the tiers usable
    here (fast first) and the config's placement settings."""

    placer: Placer
    tiers: list
    settings: PlacementSettings


def _measure_config(row: dict, models: ModelCache, device: str, settings: TimingSettings, energy,
                    placing: Placing | None = None, pool: int = 1, earlier: dict | None = None) -> list[tuple]:
    """[(placement text, verified text, phase, Measurement, energy columns)] for one configuration, one entry per
    placement and phase (the default placement only, without ``placing``); raises when it cannot be replayed.
    ``earlier``: {(placement text, phase): the Measurements of earlier visits} (:func:`_visit`)."""
    earlier = earlier or {}
    if placing is None:
        rep = build(row, models, device, pool=pool)
        with rep.context():
            return [(DEFAULT, None, phase, measure(fn, settings, device, **_visit(earlier.get((DEFAULT, phase)))),
                     energy(fn)) for phase, fn in rep.callables()]
    placer, tiers, place_cfg = placing.placer, placing.tiers, placing.settings
    probe = build(row, models, device)
    with probe.context():
        alias = aliased_input(probe.inputs, probe.outputs())
    plans = plan(len(probe.inputs), bool(probe.params), [t.name for t in tiers], place_cfg.params,
                 place_cfg.max_per_config, alias, output_tier(tiers, device))
    out = []
    for k, plc in enumerate(plans):
        rep = None
        try:
            rep = build(row, models, device, plc, placer, pool=pool)
            with rep.context():
                inputs = storages(rep.inputs)
                for t in rep.outputs():  # outputs land on their tier: the allocator reuses the bound memory
                    if t.untyped_storage().data_ptr() not in inputs:  # not a view of an input (already placed)
                        placer.bind_output(t, plc.out)
                results = [(phase, measure(fn, settings, device, **_visit(earlier.get((str(plc), phase)))),
                            energy(fn)) for phase, fn in rep.callables()]
                verified = _verify(rep, placer)
        except Exception as e:
            if k == 0:  # the all-fast placement: the configuration itself fails
                raise
            log.warning("%s %s placement %s failed: %s", row["config_id"], row["op_type"], plc, e)
            out.append((str(plc), None, "forward", None, _failure(e)))
            continue  # the other placements, the baseline among them, are kept
        finally:
            if rep is not None:
                rep.close()
            placer.unbind_outputs()
        out += [(str(plc), verified, phase, m, e) for phase, m, e in results]
    return out


def _visit(earlier: list | None) -> dict:
    """:func:`opcost.measure.timing.measure`'s arguments for another visit, after ``earlier`` visits' Measurements: the
    second completes the first where that one is not noisy; any later one stands alone; all take samples of as many
    calls as the first, so that any two can be pooled."""
    if not earlier:
        return {}
    if len(earlier) == 1 and not earlier[0].noisy:
        return {"prior": earlier[0]}
    return {"calls": earlier[0].calls_per_sample}


def _verify(rep, placer) -> str:
    """Where the inputs, parameters and (a fresh call's) outputs really are, in the ``placement`` text form."""
    return str(Placement(tuple(placer.where(t) for t in rep.inputs),
                         placer.where_all(rep.params) if rep.params else None, placer.where_all(rep.outputs())))


def _placement_tiers(placement: PlacementSettings, device: str, needed: int) -> tuple[list, Placer | None]:
    """(the configured tiers usable on this host, a Placer over them or None where fewer than ``needed``); skipped
    tiers, and a placement measuring the default placement only, are logged."""
    tiers, skipped = usable_tiers(placement, device) if placement.enabled else ([], {})
    for why in skipped.values():
        log.warning("placement skipped: %s", why)
    if placement.enabled and len(tiers) < needed:
        log.warning("placement: %d usable tier(s) here; measuring the default placement only", len(tiers))
    return tiers, Placer(tiers, device) if len(tiers) >= needed else None


def _failure(e: BaseException) -> str:
    """The `status` of a failed measurement: one line naming the error."""
    return f"failed: {failure(e)}"


def _rel_iqr(m) -> float:
    return m.iqr / m.median if m.median > 0 else float("inf")


@dataclass(frozen=True)
class ProfileSettings:
    """How isolated profiling measures (config `profile` and `placement`; see :func:`profile_configs`)."""
    timing: TimingSettings = field(default_factory=TimingSettings)
    cache: str = "fresh"
    order: str = "model"
    remeasure: int = 1
    visits: int = 2
    rotation_size: int = MAX_ROTATION
    e2e_every: int = 4
    placement: PlacementSettings = field(default_factory=PlacementSettings)

    @classmethod
    def from_config(cls, config: dict) -> ProfileSettings:
        """From a validated config (the cache state as :func:`cache_state` resolves it for the config's device)."""
        p = config["profile"]
        return cls(TimingSettings.from_config(p["timing"]), cache_state(p["cache"], config["device"]), p["order"],
                   int(p["remeasure"]), int(p["visits"]), int(p["rotation_size"]), int(p["e2e_every"]),
                   PlacementSettings.from_config(config["placement"]))


def profile_configs(configs: pd.DataFrame, models_cfg: dict, device: str, dtype: str, settings: ProfileSettings, *,
                    on_result=None, energy=None, context: pd.DataFrame | None = None,
                    on_e2e=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every configuration (under each placement, when tiers are configured); returns (`measurements`
    rows, `samples` rows). The fields of ``settings`` (:class:`ProfileSettings`) below are named ``settings.X``.
    ``settings.cache`` is the state a call finds the machine in. ``fresh`` (default) and ``rotation``: configurations
    are timed in rotation, one call at a time (:func:`opcost.measure.rotation.measure_rotation`), so weights, code
    and the thread pool are as other operators left them, as in a model; with ``fresh`` each call reads what its
    producer just wrote: in model order and inference, an input that is a recorded call's output in the model (column
    `feeds`) is that call's output of the same round (:func:`opcost.measure.rotation.producer_feed`), and the other
    inputs are rewritten just before the call (untimed, :func:`opcost.model.replay.refresher`), as their producer would
    have written them. ``warm`` (inputs reused) and ``cold`` (inputs rotate over a pool larger than the last-level
    cache): each configuration alone, back-to-back calls.
    Placements other than the default (two or more usable tiers) are always measured back-to-back, each against
    its all-fast-tier reference measured the same way (``cold`` pools in the rotation states).

    Configurations flagged noisy are measured again, up to ``settings.remeasure`` more times (blocked: after all the
    others, at another moment of the machine's life; rotation: in another rotation of the same group, timing only them);
    per placement and phase the least noisy attempt is kept and ``attempts`` records how many were made.
    ``settings.visits`` (back-to-back states): each configuration is measured in passes over all of them until, per
    placement and phase, two of its measurements that are not noisy agree
    (:meth:`opcost.measure.timing.Measurement.agrees`), at most ``settings.visits`` + ``settings.remeasure`` times; the
    second visit samples until both visits' samples together meet the precision target
    (:func:`opcost.measure.timing.measure`'s ``prior``); the closest agreeing pair's samples are kept together, else the
    lower median of the measurements that are not noisy (a machine that was slow for a whole visit makes it slower,
    never faster). A configuration that cannot be replayed gets a row with status ``failed: ...`` and the others go on.
    ``on_result(rows, samples)`` is called once per finished configuration (the journal hook). ``energy(fn)``
    returns the energy columns of a phase (default: missing, meter none). ``context``: configurations that rotate
    with them untimed and unrecorded, each with the configurations of its own workload (the profile stage passes
    all others: a chunk's or a loop iteration's configurations then run between the operators they follow in the
    model, not only among their own kind).
    ``settings.rotation_size``: at most this many configurations (context included) per rotation; a rotation's
    configurations are journaled together when it ends. ``settings.order``: a rotation's rounds in the workload's call
    order (``model``: a round is one iteration's call sequence, column `positions`, restricted to the rotation's
    configurations: each operator follows its predecessor in the model and is called as often as the model calls
    it; each call's output lives until the call where the model drops it, column `releases`) or each configuration
    once in an order shuffled every round (``shuffled``). ``settings.e2e_every`` > 0 with ``on_e2e``: every
    ``settings.e2e_every``-th round of each rotation ends with its workload's whole model iteration, timed after a
    lead-in of untimed iterations lasting about 5 ms (at least one: :func:`opcost.measure.rotation.lead_in`;
    shuffled: one iteration, anywhere in the round), and ``on_e2e(e2e_row, samples)`` receives the timed one (after
    iterations, as in a run) as an `e2e` row of method `rotation`: the end-to-end time of the same minutes as the
    operators (a prediction checked against an e2e run minutes apart inherits the machine's drift between the two).
    A workload that owns no configuration (:func:`guest_workloads`) has its iterations timed likewise in each
    rotation that times one of its configurations."""
    energy = energy or (lambda fn: missing(NoMeter()))
    if settings.cache in ROTATION_STATES:
        return _profile_rotation(configs, models_cfg, device, dtype, settings, on_result, energy, context, on_e2e)
    timing, placement, cache, remeasure = settings.timing, settings.placement, settings.cache, settings.remeasure
    tiers, placer = _placement_tiers(placement, device, needed=1)
    models = ModelCache(models_cfg, device, dtype)
    facts = host_facts(device)
    tries: dict[str, dict] = {}  # config_id -> {(placement, phase): [(verified, Measurement, energy, cache label)]}
    attempts: dict[str, int] = {}
    failed: dict[str, str] = {}
    ordered = measurement_order(configs).to_dict("records")
    by_id = {r["config_id"]: r for r in ordered}
    todo = [r["config_id"] for r in ordered]
    final: dict[str, tuple] = {}  # config_id -> (rows, samples), built once, when the configuration is settled
    visits = max(1, settings.visits)
    last_round = max(0, remeasure) + visits - 1
    fast = tiers[0].name if tiers else None
    llc = llc_bytes()
    pools: dict[str, tuple[int, str]] = {}  # config_id -> (input copies, cache label), worked out once
    for round_ in range(1 + last_round):
        t_round = time.perf_counter()
        for k, cid in enumerate(todo, 1):
            row = by_id[cid]
            attempts[cid] = attempts.get(cid, 0) + 1
            if cid not in pools:
                pools[cid] = cold_pool(row, cache, llc)
            pool = pools[cid][0]
            earlier = {key: [x[1] for x in t if x[1] is not None]
                       for key, t in tries.get(cid, {}).items()} if visits > 1 else None
            try:
                result = _measure_config(row, models, device, timing, energy,
                                         Placing(placer, tiers, placement) if placer is not None else None, pool,
                                         earlier)
            except Exception as e:  # one bad configuration must not lose the others
                log.warning("[%d/%d] %s %s failed: %s", k, len(todo), cid, row["op_type"], e)
                failed[cid] = _failure(e)
                result = None
            if result is not None:
                failed.pop(cid, None)
                for plc, ver, ph, m, e in result:  # m is None: this placement failed (e: the reason)
                    tries.setdefault(cid, {}).setdefault((plc, ph), []).append((ver, m, e, pools[cid][1]))
                eta = (time.perf_counter() - t_round) / k * (len(todo) - k)
                for plc, ver, ph, m, _ in result:
                    if m is None:
                        continue
                    log.info("[%d/%d] %s %-14s %-8s %s median %.3g ms n=%d rel_ci=%.3f%s%s%s  ETA %.0f s", k,
                             len(todo), cid, row["op_type"], ph, "" if plc == DEFAULT else plc, m.median * 1e3, m.n,
                             m.rel_ci, " NOISY" if m.noisy else "",
                             "" if ver is None or matches_all(plc, ver) else f" PLACEMENT MISMATCH ({ver})",
                             f" (attempt {attempts[cid]})" if attempts[cid] > 1 else "", eta)
            picks = {key: _pick(t, visits) for key, t in tries.get(cid, {}).items()}  # none: it never ran
            if all(done for _, done in picks.values()) or round_ == last_round:
                final[cid] = _rows(row, {key: kept for key, (kept, _) in picks.items()} or None, failed.get(cid),
                                   attempts[cid], facts, fast)
                if on_result is not None:
                    on_result(*final[cid])
        todo = [cid for cid in todo if cid not in final]
        if not todo:
            break
        log.info("measuring %d configurations again (noisy, or fewer than %d agreeing visits; pass %d of %d)",
                 len(todo), visits, round_ + 2, last_round + 1)
    rows = [r for cid in by_id for r in final[cid][0]]
    samples = [x for cid in by_id for x in final[cid][1]]
    return frame(MEASUREMENTS, rows), frame(SAMPLES, samples)


def _pick(tries: list[tuple], visits: int) -> tuple[tuple, bool]:
    """(the attempt kept, settled) of one placement and phase of a configuration, from its attempts (verified,
    Measurement or None when the placement failed, energy or failure, cache label), oldest first; see
    :func:`profile_configs`."""
    ok = [t for t in tries if t[1] is not None]
    if not ok:  # the placement failed (its reason in the energy slot): not measured again
        return tries[-1], True
    if visits > 1:
        usable = [t for t in ok if not t[1].noisy]
        pairs = [(a, b) for i, a in enumerate(usable) for b in usable[i + 1:] if a[1].agrees(b[1])]
        if pairs:
            a, b = min(pairs, key=lambda p: abs(p[0][1].median - p[1][1].median))
            return (a[0], a[1].pooled(b[1]), a[2], a[3]), True
        if usable:
            return min(usable, key=lambda t: t[1].median), False
    best = min(ok, key=lambda t: _rel_iqr(t[1]))  # the least noisy: settled with one visit if not noisy
    return best, visits <= 1 and not best[1].noisy


def matches_all(requested: str, verified: str) -> bool:
    """Every tensor of a placement verified on its requested tier."""
    req, ver = Placement.parse(requested), Placement.parse(verified)
    if len(req.inputs) != len(ver.inputs) or (req.params is None) != (ver.params is None):
        return False
    pairs = list(zip(req.tiers(), ver.tiers()))
    return all(v == "empty" or matches(r, part) for r, v in pairs for part in v.split("+"))


NO_STATS = dict.fromkeys(Measurement(np.array([]), 1, 0.0).stats())  # the statistics columns of a failed row


def _rows(row: dict, result, failure, attempts: int, facts: dict, fast: str | None, engine_s: float | None = None):
    """Rows and samples of one configuration; ``result``: {(placement, phase): (verified, Measurement or None,
    energy columns or the failure, cache label)}. ``engine_s``: the autograd engine's cost per call measured with
    the default placement's backward, taken out of that row (:func:`opcost.measure.engine.net_of_engine`)."""
    base = {"config_id": row["config_id"], "op_type": row["op_type"], "mode": row["mode"], "source": "isolated",
            "workload": None, "attempts": attempts, **facts, "cache": None, "engine_s": None, **NO_STATS}
    if result is None:
        return [{**base, "phase": "forward", "placement": DEFAULT, "placement_verified": None, "placement_ok": None,
                 "baseline": True,
                 "status": failure or "failed: not measured", **missing(NoMeter()), "timestamp": now()}], []
    rows, samples = [], []
    for (plc, phase), (ver, m, e, label) in result.items():
        base["cache"] = label
        baseline = plc == DEFAULT or Placement.parse(plc).all_on(fast)
        if m is None:  # one placement failed; e holds the reason
            rows.append({**base, "phase": phase, "placement": plc, "placement_verified": None, "placement_ok": None,
                         "baseline": baseline, "status": e, **missing(NoMeter()), "timestamp": now()})
            continue
        if phase != "forward":  # backward writes gradients to default memory: its placement is not verified
            ver = None
        stats, seconds = m.stats(), [float(x) for x in m.samples]
        if phase == "backward" and plc == DEFAULT and engine_s is not None:
            stats, seconds = net_of_engine(stats, seconds, engine_s)
        rows.append({**base, "phase": phase, "placement": plc, "placement_verified": ver,
                     "placement_ok": None if ver is None else matches_all(plc, ver), "baseline": baseline,
                     "status": "ok", **stats, **e, "timestamp": now()})
        samples += [{"key": row["config_id"], "source": "isolated", "placement": plc, "phase": phase, "i": i,
                     "seconds": x} for i, x in enumerate(seconds)]
    return rows, samples


def rotation_groups(configs: pd.DataFrame, context: pd.DataFrame | None = None,
                     size: int = MAX_ROTATION) -> list[tuple[list[dict], list[dict]]]:
    """(configurations, context configurations) per rotation. Configurations rotate with the others of their
    workload (column `workload`: the state an operator finds depends on its neighbours, and a batch-1 operator
    among batch-8 ones would find caches far colder than in its model), in measurement order, in groups of at most
    ``size``; each group gets the context configurations of its workload (not among the configurations) up to
    ``size`` members in all. Without a `workload` column (older catalogues), by mode."""
    def key(r):
        w = r.get("workload")
        return (r["mode"], w if isinstance(w, str) else "")

    rows = measurement_order(configs).to_dict("records")
    ctx = [] if context is None or context.empty else measurement_order(context).to_dict("records")
    ids = {r["config_id"] for r in rows}
    groups = []
    for k in sorted({key(r) for r in rows}):
        same = [r for r in rows if key(r) == k]
        extra = [r for r in ctx if key(r) == k and r["config_id"] not in ids]
        for i in range(0, len(same), size):
            part = same[i:i + size]
            groups.append((part, extra[:size - len(part)]))
    return groups


def _replays(rows, models: ModelCache, device: str, failed: dict, reps: list | None = None) -> list[tuple]:
    """``reps`` (default: a new list) with (row, Replay) appended for each of ``rows`` that builds, in their order
    (built outside the autograd context: a model loaded in inference mode cannot train; each appended as it is
    built, so that a caller interrupted midway can close those built); one that does not is recorded in ``failed``
    and said in the log."""
    reps = [] if reps is None else reps
    for row in rows:
        try:
            reps.append((row, build(row, models, device)))
        except Exception as e:
            failed[row["config_id"]] = _failure(e)
            log.warning("%s %s %s", row["config_id"], row["op_type"], failed[row["config_id"]])
    return reps


def _leads(iterations: dict[str, Callable[[], object]], device: str) -> dict[str, Callable[[], object]]:
    """Workload -> the lead-in of its reference iteration (:func:`opcost.measure.rotation.lead_in`), in the order of
    ``iterations``; an iteration that fails here is said in the log and removed from ``iterations``."""
    leads = {}
    for key in list(iterations):
        try:
            leads[key] = lead_in(iterations[key], device)
        except Exception as e:
            log.warning("the model iteration of %s failed before the rotation (%s); rotating without it", key,
                        _failure(e))
            del iterations[key]
    return leads


def _members(reps: list, fresh: bool, failed: dict) -> list[tuple]:
    """(config_id, phase, callable, prepare) per phase of each replay (call inside its autograd context); each
    callable is called once here, so that a failing configuration fails here (recorded in ``failed``), not inside
    the rotation."""
    members = []
    for row, rep in reps:
        try:
            refresh = refresher(rep.inputs) if fresh else None
            mine = []
            for phase, fn in rep.callables():
                fn()
                mine.append(Member(row["config_id"], phase, fn, both(refresh, rep.prepare.get(phase))))
            members += mine
        except Exception as e:
            failed[row["config_id"]] = _failure(e)
            log.warning("%s %s %s", row["config_id"], row["op_type"], failed[row["config_id"]])
    return members


def _rotate(rows: list[dict], models: ModelCache, device: str, settings: ProfileSettings, energy, seed: int,
            context: list[dict] = (), iterations: dict[str, Callable[[], object]] | None = None
            ) -> tuple[dict, dict, dict, dict[str, Measurement], dict]:
    """Time one group of same-mode configurations in rotation (with ``context`` configurations rotating untimed).
    Returns ({config_id: {(DEFAULT, phase): (None, Measurement, energy columns)}}, {config_id: failure},
    {config_id: attempts}, {workload: its iteration's Measurement}, {config_id: the autograd engine's cost per call
    measured in the rotation its backward measurement was kept from}). A rotation with backward calls measures the
    engine among them (:func:`opcost.measure.rotation.with_engine_probes`). A configuration whose replay fails (when
    built, on a first call, or inside the rotation) is reported failed and the rotation goes on without it; a failing
    context configuration is left out. ``iterations`` (workload -> its whole model iteration: the group's own and
    those of the workloads whose configurations all rotate in others' groups) with ``settings.e2e_every`` > 0:
    timed at the end of every ``e2e_every``-th round of the first rotation, the end-to-end references measured in
    the same minutes, under the same machine state, as the operators; one that fails is left out."""
    fresh, shuffle, every = settings.cache == "fresh", settings.order != "model", settings.e2e_every
    failed: dict[str, str] = {}
    timed = {r["config_id"] for r in rows}
    iterations = dict(iterations or {})
    whole: dict[str, Measurement] = {}  # workload -> its iteration's Measurement
    engine_of: dict[str, float] = {}  # config_id -> the engine's cost per call in its backward's rotation
    reps: list = []  # (row, Replay), closed at the end
    try:
        members_rows = list(rows) + list(context)
        _replays(members_rows if shuffle else sorted(members_rows, key=first_call), models, device, failed, reps)
        by_id = {row["config_id"]: rep for row, rep in reps}
        with mode_context(rows[0]["mode"]):
            members = _members(reps, fresh, failed)
            probes = engine_probes(device) if any(m.phase == "backward" for m in members) else None
            leads = _leads(iterations, device) if every > 0 and not shuffle else {}
            results: dict[str, dict] = {}
            attempts: dict[str, int] = {}
            noisy: set = set()  # (config_id, phase) still to re-measure; empty on the first attempt
            for attempt in range(1 + max(0, settings.remeasure)):
                if not any(m[0] in timed for m in members):
                    break
                while True:
                    targets = [i for i, m in enumerate(members) if (m[0], m[1]) in noisy or (
                        not attempt and m[0] in timed)]
                    rotation = shuffled(members) if shuffle else _model_order(members, members_rows, by_id, fresh)
                    if probes is not None:
                        rotation = with_engine_probes(rotation, *probes)
                    paired = bool(iterations) and every > 0 and not attempt
                    if paired:
                        rotation = with_iterations(rotation, list(iterations.values()), every,
                                                   [leads[k] for k in iterations] if leads else None)
                    try:
                        ms = rotation.measure(settings.timing, device, seed=seed + attempt, targets=targets)
                        extra = ms[len(members):]
                        if probes is not None:
                            engine_s = engine_intercept(extra[0].median, extra[1].median)
                            log.info("autograd engine in the rotation: %.1f us per backward call", engine_s * 1e6)
                            extra = extra[2:]
                        if paired:
                            per = ITERATION_CALLS[rotation.shuffle]
                            for i, key in enumerate(iterations):
                                mine = extra[i * per:(i + 1) * per]
                                if len(mine) == 2:
                                    log.info("%s lead-in after a round: trimmed mean %.3g ms; the reference after "
                                             "it: %.3g ms", key, mine[0].trimmed_mean * 1e3,
                                             mine[1].trimmed_mean * 1e3)
                                whole[key] = mine[-1]
                        ms = ms[:len(members)]
                        break
                    except RotationError as e:
                        first = len(members) + (2 if probes is not None else 0)
                        if e.index >= first:
                            key = list(iterations)[(e.index - first) // ITERATION_CALLS[rotation.shuffle]]
                            log.warning("the model iteration of %s failed inside the rotation (%s); rotating without "
                                        "it", key, _failure(e.error))
                            del iterations[key]
                            continue
                        if e.index >= len(members):
                            log.warning("the autograd engine's probe failed inside the rotation (%s); rotating "
                                        "without it", _failure(e.error))
                            probes = None
                            continue
                        cid = members[e.index][0]
                        why = _failure(e.error)
                        log.warning("%s failed inside the rotation (%s); rotating again without it", cid, why)
                        if cid not in results:  # a re-measurement that fails keeps the first attempt
                            failed[cid] = why
                        members = [m for m in members if m[0] != cid]
                        noisy = {k for k in noisy if k[0] != cid}
                for (cid, phase, _, _), m in zip(members, ms):
                    if cid not in timed or (attempt and (cid, phase) not in noisy):
                        continue
                    attempts[cid] = attempt + 1
                    prev = results.get(cid, {}).get((DEFAULT, phase))
                    if prev is None or m.rel_ci < prev[1].rel_ci:
                        results.setdefault(cid, {})[(DEFAULT, phase)] = (None, m, missing(NoMeter()))
                        if phase == "backward" and probes is not None:
                            engine_of[cid] = engine_s
                noisy = {(cid, ph) for cid, r in results.items() for (_, ph), (_, m, _) in r.items() if m.noisy}
                if not noisy or attempt == settings.remeasure:
                    break
                log.info("re-measuring %d noisy configuration phases in another rotation of the group", len(noisy))
            for cid, phase, fn, _ in members:  # energy: back-to-back trials, where a meter exists
                if cid not in timed or (DEFAULT, phase) not in results.get(cid, {}):
                    continue
                ver, m, _ = results[cid][(DEFAULT, phase)]
                results[cid][(DEFAULT, phase)] = (ver, m, energy(fn))
    finally:
        for _, rep in reversed(reps):  # parameters shared between configurations are restored in reverse
            rep.close()
    return results, failed, attempts, whole, engine_of


def _model_order(members: list, rows: list[dict], by_id: dict, fresh: bool):
    """The model-order rotation of ``members`` (``rows``: their configurations; ``by_id``: their replays), fed its
    producers' outputs in inference under the ``fresh`` cache state."""
    return model_order(members, rows, by_id, feed=fresh and rows[0]["mode"] == "inference")


def operator_round(configs: pd.DataFrame, models_cfg: dict, device: str = "cpu", dtype: str = "float32",
                   e2e_every: int | None = None) -> tuple[Callable[[], list[float]], dict[str, str]]:
    """One iteration's operator calls of a workload (``configs``: its `configs` rows) as the profile stage times
    them under its CPU default (``cache: fresh``, ``order: model``), with its model's reference iteration closing
    every ``e2e_every``-th round after its lead-in, as there (default: the config's default; 0: none): a function
    that runs one rotation round and returns the seconds of each operator call, in call order
    (:func:`opcost.measure.rotation.round_timer`), and the configurations left out, {config_id: failure} (those
    that cannot be built or fail on a first call)."""
    from opcost.config import schema

    if e2e_every is None:
        e2e_every = int(schema()["properties"]["profile"]["properties"]["e2e_every"]["default"])
    rows = sorted(configs.to_dict("records"), key=first_call)
    models = ModelCache(models_cfg, device, dtype)
    failed: dict[str, str] = {}
    reps = _replays(rows, models, device, failed)
    mode = rows[0]["mode"]
    with mode_context(mode):
        members = _members(reps, True, failed)
        kept = [row for row, _ in reps if row["config_id"] not in failed]
        rotation = _model_order(members, kept, {row["config_id"]: rep for row, rep in reps}, True)
        iterations = _references(rows, set(), models) if e2e_every > 0 else {}
        leads = _leads(iterations, device)
        if iterations:
            rotation = with_iterations(rotation, list(iterations.values()), e2e_every, list(leads.values()))
    one = round_timer(rotation, device, len(members))

    def run() -> list[float]:
        with mode_context(mode):
            return one()

    return run, failed


def _iteration(key: str, models: ModelCache) -> Callable[[], object] | None:
    """The whole model iteration of a workload, or None (a model that cannot run: said in the log)."""
    try:
        model, mode, batch = parse_workload_key(key)
        return make_workload(models.get(model), batch, mode).step
    except Exception as e:
        log.warning("%s: no end-to-end time in the rotation: %s", key, _failure(e))
        return None


def guest_workloads(configs: pd.DataFrame) -> set[str]:
    """The workloads that call configurations of ``configs`` (column `workloads`) but are no configuration's
    `workload`: each of their configurations rotates in another workload's group (resnet34's among resnet18's,
    which has them all), so that their end-to-end reference is timed in those groups' rotations; none in older
    catalogues."""
    if "workloads" not in configs:
        return set()
    called = {w for s in configs["workloads"].dropna() for w in json.loads(s)}
    return called - set(configs["workload"].dropna())


def calls_in(row: dict, key: str) -> int:
    """A configuration's calls per iteration of workload ``key``: its own workload's from `positions`, another's
    from `workloads` (0 where it does not call it)."""
    if key == row.get("workload"):
        return len(call_positions(row))
    w = row.get("workloads")
    return int(json.loads(w).get(key, 0)) if isinstance(w, str) else 0


def _references(group: list[dict], guests: set[str], models: ModelCache) -> dict[str, Callable[[], object]]:
    """The model iterations timed in a rotation group's rounds: its workload's, then each guest workload's
    (:func:`guest_workloads`) that calls a configuration of the group."""
    own = group[0].get("workload")
    if not isinstance(own, str):
        return {}
    keys = [own] + sorted({w for r in group if isinstance(r.get("workloads"), str)
                           for w in json.loads(r["workloads"]) if w in guests})
    return {k: it for k in keys if (it := _iteration(k, models)) is not None}


def _profile_rotation(configs, models_cfg, device, dtype, settings: ProfileSettings, on_result, energy,
                      context=None, on_e2e=None):
    """:func:`profile_configs` for the rotation cache states (placements only where two tiers are usable: the
    rotation row is the default placement's measurement)."""
    timing, placement, cache, e2e_every = settings.timing, settings.placement, settings.cache, settings.e2e_every
    tiers, placer = _placement_tiers(placement, device, needed=2)
    models = ModelCache(models_cfg, device, dtype)
    facts = host_facts(device)
    llc = llc_bytes()
    fast = tiers[0].name if tiers else None
    rows, samples = [], []
    groups = rotation_groups(configs, context, settings.rotation_size)
    guests = guest_workloads(configs if context is None else pd.concat([configs, context], ignore_index=True))
    t0, done = time.perf_counter(), 0
    for g, (group, ctx) in enumerate(groups):
        if ctx:
            log.info("rotation group %d: %d configurations, %d more rotating untimed as context", g + 1, len(group),
                     len(ctx))
        iterations = _references(group, guests, models) if e2e_every > 0 and on_e2e is not None else {}
        results, failed, attempts, whole, engine_of = _rotate(group, models, device, settings, energy, seed=g,
                                                              context=ctx, iterations=iterations)
        for key, it in whole.items():
            if not it.n:
                continue
            log.info("%s: model iteration in the rotation: median %.3g ms n=%d", key, it.median * 1e3, it.n)
            model, mode, batch = parse_workload_key(key)
            # the part of the workload's prediction this rotation measured: its reference's weight among rotations
            timed = sum(calls_in(row, key) * m.median for row in group
                        for (plc, _), (_, m, _) in results.get(row["config_id"], {}).items() if plc == DEFAULT)
            on_e2e(*e2e_frames((model, batch, mode), it, "rotation", device, timed_s=timed))
        for row in group:
            cid = row["config_id"]
            result = {k: (ver, m, e, cache) for k, (ver, m, e) in results.get(cid, {}).items()}
            for (_, phase), (_, m, _, _) in result.items():
                log.info("%s %-14s %-8s median %.3g ms n=%d rel_ci=%.3f%s", cid, row["op_type"], phase,
                         m.median * 1e3, m.n, m.rel_ci, " NOISY" if m.noisy else "")
            if placer is not None and cid not in failed:
                pool, label = cold_pool(row, "cold", llc)
                try:
                    for plc, ver, ph, m, e in _measure_config(row, models, device, timing, energy,
                                                              Placing(placer, tiers, placement), pool):
                        result[(plc, ph)] = (ver, m, e, label)
                except Exception as e:
                    log.warning("%s %s placements failed: %s", cid, row["op_type"], e)
            out = _rows(row, result or None, failed.get(cid), attempts.get(cid, 1), facts, fast, engine_of.get(cid))
            rows += out[0]
            samples += out[1]
            if on_result is not None:
                on_result(*out)
        done += len(group)
        log.info("rotation group %d/%d: %d configurations in %.1f s (ETA %.0f s)", g + 1, len(groups), len(group),
                 time.perf_counter() - t0, (time.perf_counter() - t0) / done * (len(configs) - done))
    return frame(MEASUREMENTS, rows), frame(SAMPLES, samples)
