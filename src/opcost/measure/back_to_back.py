"""The back-to-back profiling engine: each configuration alone, calls one after the other (the ``warm`` and ``cold``
cache states, and every placement other than the default), in visits until two agree."""
from __future__ import annotations

import logging
import time

import pandas as pd

from opcost.measure.cache import cold_pool
from opcost.measure.hostinfo import host_facts, llc_bytes
from opcost.measure.placement import (
    DEFAULT,
    Placement,
    aliased_input,
    output_tier,
    plan,
    storages,
)
from opcost.measure.profiling import (
    Placing,
    ProfileSettings,
    failure_status,
    matches_all,
    measurement_order,
    placement_tiers,
    rel_iqr,
    result_rows,
)
from opcost.measure.timing import TimingSettings, measure
from opcost.model.replay import ModelCache, build
from opcost.tables import MEASUREMENTS, SAMPLES, frame

log = logging.getLogger(__name__)


def measure_config(row: dict, models: ModelCache, device: str, settings: TimingSettings, energy,
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
            out.append((str(plc), None, "forward", None, failure_status(e)))
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


def profile_back_to_back(configs: pd.DataFrame, models_cfg: dict, device: str, dtype: str, settings: ProfileSettings,
                         on_result, energy) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`opcost.measure.profile.profile_configs` for the back-to-back cache states (``warm``, ``cold``): each
    configuration alone, in passes over all of them until its visits agree or its attempts run out."""
    timing, placement, cache, remeasure = settings.timing, settings.placement, settings.cache, settings.remeasure
    tiers, placer = placement_tiers(placement, device, needed=1)
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
                result = measure_config(row, models, device, timing, energy,
                                         Placing(placer, tiers, placement) if placer is not None else None, pool,
                                         earlier)
            except Exception as e:  # one bad configuration must not lose the others
                log.warning("[%d/%d] %s %s failed: %s", k, len(todo), cid, row["op_type"], e)
                failed[cid] = failure_status(e)
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
            picks = {key: pick(t, visits) for key, t in tries.get(cid, {}).items()}  # none: it never ran
            if all(done for _, done in picks.values()) or round_ == last_round:
                final[cid] = result_rows(row, {key: kept for key, (kept, _) in picks.items()} or None, failed.get(cid),
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


def pick(tries: list[tuple], visits: int) -> tuple[tuple, bool]:
    """(the attempt kept, settled) of one placement and phase of a configuration, from its attempts (verified,
    Measurement or None when the placement failed, energy or failure, cache label), oldest first; see
    :func:`opcost.measure.profile.profile_configs`."""
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
    best = min(ok, key=lambda t: rel_iqr(t[1]))  # the least noisy: settled with one visit if not noisy
    return best, visits <= 1 and not best[1].noisy
