"""The rotation profiling engine: a workload's configurations timed in rotation, one call at a time, in the model's
call order (the ``fresh`` and ``rotation`` cache states), with the model's reference iteration in the same rounds."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import pandas as pd

from opcost.measure.back_to_back import measure_config, pick
from opcost.measure.cache import cold_pool
from opcost.measure.e2e import e2e_frames
from opcost.measure.energy import NoMeter, missing
from opcost.measure.engine import engine_intercept, engine_probes
from opcost.measure.hostinfo import host_facts, llc_bytes
from opcost.measure.placement import (
    DEFAULT,
)
from opcost.measure.profiling import (
    MAX_ROTATION,
    Placing,
    ProfileSettings,
    failure_status,
    measurement_order,
    placement_tiers,
    result_rows,
)
from opcost.measure.rotation import (
    ITERATION_CALLS,
    Member,
    both,
    call_positions,
    first_call,
    lead_in,
    model_order,
    shuffled,
    with_engine_probes,
    with_iterations,
)
from opcost.measure.timing import RotationError
from opcost.model.replay import ModelCache, build, mode_context, refresher
from opcost.model.sweep_points import PREFIX as SWEEP_PREFIX
from opcost.model.workload import make_workload, parse_workload_key
from opcost.tables import MEASUREMENTS, SAMPLES, frame

log = logging.getLogger(__name__)


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


def replays(rows, models: ModelCache, device: str, failed: dict, reps: list | None = None) -> list[tuple]:
    """``reps`` (default: a new list) with (row, Replay) appended for each of ``rows`` that builds, in their order
    (built outside the autograd context: a model loaded in inference mode cannot train; each appended as it is
    built, so that a caller interrupted midway can close those built); one that does not is recorded in ``failed``
    and said in the log."""
    reps = [] if reps is None else reps
    for row in rows:
        try:
            reps.append((row, build(row, models, device)))
        except Exception as e:
            failed[row["config_id"]] = failure_status(e)
            log.warning("%s %s %s", row["config_id"], row["op_type"], failed[row["config_id"]])
    return reps


def lead_ins(iterations: dict[str, Callable[[], object]], device: str) -> dict[str, Callable[[], object]]:
    """Workload -> the lead-in of its reference iteration (:func:`opcost.measure.rotation.lead_in`), in the order of
    ``iterations``; an iteration that fails here is said in the log and removed from ``iterations``."""
    leads = {}
    for key in list(iterations):
        try:
            leads[key] = lead_in(iterations[key], device)
        except Exception as e:
            log.warning("the model iteration of %s failed before the rotation (%s); rotating without it", key,
                        failure_status(e))
            del iterations[key]
    return leads


def member_calls(reps: list, fresh: bool, failed: dict) -> list[tuple]:
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
            failed[row["config_id"]] = failure_status(e)
            log.warning("%s %s %s", row["config_id"], row["op_type"], failed[row["config_id"]])
    return members


@dataclass
class _Group:
    """One rotation group's state across its attempts (:func:`_rotate`): the members still rotating (one per
    configuration and phase), the model iterations and engine probes rotating with them while they work, and what the
    attempts measured."""

    members: list  # Member per configuration and phase, those that have not failed
    timed: set  # the group's configuration ids (context configurations rotate untimed)
    iterations: dict  # workload -> its model iteration, those that have not failed
    probes: tuple | None  # the autograd engine's probes (a rotation with backward calls), while they work
    failed: dict  # config_id -> failure
    results: dict = field(default_factory=dict)  # config_id -> {(DEFAULT, phase): (None, Measurement, energy)}
    attempts: dict = field(default_factory=dict)  # config_id -> the attempt its kept measurement came from
    whole: dict = field(default_factory=dict)  # workload -> its iteration's Measurement
    engine_of: dict = field(default_factory=dict)  # config_id -> the engine's cost per call in its backward's rotation
    noisy: set = field(default_factory=set)  # (config_id, phase) still to re-measure; empty on the first attempt
    engine_s: float | None = None  # the engine's cost per call in the last rotation that probed it

    def targets(self, attempt: int) -> list[int]:
        """The members the rotation's precision target waits for: the timed ones, then the noisy ones."""
        return [i for i, m in enumerate(self.members)
                if (m[0], m[1]) in self.noisy or (not attempt and m[0] in self.timed)]

    def split(self, ms: list, rotation, paired: bool) -> list:
        """The members' measurements of a rotation's (``ms``); the engine's cost per call and the model
        iterations' measurements (``paired``) that follow them kept."""
        extra = ms[len(self.members):]
        if self.probes is not None:
            self.engine_s = engine_intercept(extra[0].median, extra[1].median)
            log.info("autograd engine in the rotation: %.1f us per backward call", self.engine_s * 1e6)
            extra = extra[2:]
        if paired:
            per = ITERATION_CALLS[rotation.shuffle]
            for i, key in enumerate(self.iterations):
                mine = extra[i * per:(i + 1) * per]
                if len(mine) == 2:
                    log.info("%s lead-in after a round: trimmed mean %.3g ms; the reference after it: %.3g ms", key,
                             mine[0].trimmed_mean * 1e3, mine[1].trimmed_mean * 1e3)
                self.whole[key] = mine[-1]
        return ms[:len(self.members)]

    def drop(self, e: RotationError, rotation) -> None:
        """Leave out what failed inside ``rotation``: a model iteration, the engine's probes, or a configuration
        (failed, unless an earlier attempt measured it)."""
        first = len(self.members) + (2 if self.probes is not None else 0)
        if e.index >= first:
            key = list(self.iterations)[(e.index - first) // ITERATION_CALLS[rotation.shuffle]]
            log.warning("the model iteration of %s failed inside the rotation (%s); rotating without it", key,
                        failure_status(e.error))
            del self.iterations[key]
        elif e.index >= len(self.members):
            log.warning("the autograd engine's probe failed inside the rotation (%s); rotating without it",
                        failure_status(e.error))
            self.probes = None
        else:
            cid = self.members[e.index][0]
            why = failure_status(e.error)
            log.warning("%s failed inside the rotation (%s); rotating again without it", cid, why)
            if cid not in self.results:  # a re-measurement that fails keeps the first attempt
                self.failed[cid] = why
            self.members = [m for m in self.members if m[0] != cid]
            self.noisy = {k for k in self.noisy if k[0] != cid}

    def keep(self, ms: list, attempt: int) -> None:
        """Keep each timed member's measurement of attempt ``attempt`` where it is the most precise so far (a
        re-measurement: only the noisy ones); what is still noisy is re-measured next."""
        for (cid, phase, _, _), m in zip(self.members, ms):
            if cid not in self.timed or (attempt and (cid, phase) not in self.noisy):
                continue
            self.attempts[cid] = attempt + 1
            prev = self.results.get(cid, {}).get((DEFAULT, phase))
            if prev is None or m.rel_ci < prev[1].rel_ci:
                self.results.setdefault(cid, {})[(DEFAULT, phase)] = (None, m, missing(NoMeter()))
                if phase == "backward" and self.probes is not None:
                    self.engine_of[cid] = self.engine_s
        self.noisy = {(cid, ph) for cid, r in self.results.items() for (_, ph), (_, m, _) in r.items() if m.noisy}

    def metered(self, energy) -> None:
        """Each kept measurement's energy: back-to-back trials of its call, where a meter exists."""
        for cid, phase, fn, _ in self.members:
            if cid in self.timed and (DEFAULT, phase) in self.results.get(cid, {}):
                ver, m, _ = self.results[cid][(DEFAULT, phase)]
                self.results[cid][(DEFAULT, phase)] = (ver, m, energy(fn))


def _rotate(rows: list[dict], models: ModelCache, device: str, settings: ProfileSettings, energy, seed: int,
            context: list[dict] = (), iterations: dict[str, Callable[[], object]] | None = None) -> _Group:
    """Time one group of same-mode configurations in rotation (with ``context`` configurations rotating untimed).
    Returns the group's :class:`_Group`: its `results` ({config_id: {(DEFAULT, phase): (None, Measurement, energy
    columns)}}), `failed`, `attempts`, `whole` (workload -> its iteration's Measurement) and `engine_of`. A rotation
    with backward calls measures the engine among them (:func:`opcost.measure.rotation.with_engine_probes`). A
    configuration whose replay fails (when built, on a first call, or inside the rotation) is reported failed and
    the rotation goes on without it; a failing context configuration is left out. ``iterations`` (workload -> its
    whole model iteration: the group's own and those of the workloads whose configurations all rotate in others'
    groups) with ``settings.e2e_every`` > 0: timed at the end of every ``e2e_every``-th round of the first rotation,
    the end-to-end references measured in the same minutes, under the same machine state, as the operators; one that
    fails is left out. Noisy configurations are re-measured in up to ``settings.remeasure`` more rotations
    (:class:`_Group`)."""
    fresh, shuffle, every = settings.cache == "fresh", settings.order != "model", settings.e2e_every
    failed: dict[str, str] = {}
    reps: list = []  # (row, Replay), closed at the end
    members_rows = list(rows) + list(context)
    try:
        replays(members_rows if shuffle else sorted(members_rows, key=first_call), models, device, failed, reps)
        by_id = {row["config_id"]: rep for row, rep in reps}
        with mode_context(rows[0]["mode"]):
            members = member_calls(reps, fresh, failed)
            probes = engine_probes(device) if any(m.phase == "backward" for m in members) else None
            g = _Group(members, {r["config_id"] for r in rows}, dict(iterations or {}), probes, failed)
            leads = lead_ins(g.iterations, device) if every > 0 and not shuffle else {}

            def rotation_of(paired: bool):
                rotation = shuffled(g.members) if shuffle else in_model_order(g.members, members_rows, by_id, fresh)
                if g.probes is not None:
                    rotation = with_engine_probes(rotation, *g.probes)
                if paired:
                    rotation = with_iterations(rotation, list(g.iterations.values()), every,
                                               [leads[k] for k in g.iterations] if leads else None)
                return rotation

            for attempt in range(1 + max(0, settings.remeasure)):
                if not any(m[0] in g.timed for m in g.members):
                    break
                while True:
                    targets = g.targets(attempt)
                    paired = bool(g.iterations) and every > 0 and not attempt
                    rotation = rotation_of(paired)
                    try:
                        ms = rotation.measure(settings.timing, device, seed=seed + attempt, targets=targets)
                    except RotationError as e:
                        g.drop(e, rotation)
                        continue
                    ms = g.split(ms, rotation, paired)
                    break
                g.keep(ms, attempt)
                if not g.noisy or attempt == settings.remeasure:
                    break
                log.info("re-measuring %d noisy configuration phases in another rotation of the group", len(g.noisy))
            g.metered(energy)
    finally:
        for _, rep in reversed(reps):  # parameters shared between configurations are restored in reverse
            rep.close()
    return g


def in_model_order(members: list, rows: list[dict], by_id: dict, fresh: bool):
    """The model-order rotation of ``members`` (``rows``: their configurations; ``by_id``: their replays), fed its
    producers' outputs in inference under the ``fresh`` cache state."""
    return model_order(members, rows, by_id, feed=fresh and rows[0]["mode"] == "inference")


def _iteration(key: str, models: ModelCache) -> Callable[[], object] | None:
    """The whole model iteration of a workload, or None (a model that cannot run: said in the log)."""
    try:
        model, mode, batch = parse_workload_key(key)
        return make_workload(models.get(model), batch, mode).step
    except Exception as e:
        log.warning("%s: no end-to-end time in the rotation: %s", key, failure_status(e))
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


def references(group: list[dict], guests: set[str], models: ModelCache) -> dict[str, Callable[[], object]]:
    """The model iterations timed in a rotation group's rounds: its workload's, then each guest workload's
    (:func:`guest_workloads`) that calls a configuration of the group."""
    own = group[0].get("workload")
    if not isinstance(own, str):
        return {}
    keys = [own] + sorted({w for r in group if isinstance(r.get("workloads"), str)
                           for w in json.loads(r["workloads"]) if w in guests})
    return {k: it for k in keys if (it := _iteration(k, models)) is not None}


def profile_rotation(configs, models_cfg, device, dtype, settings: ProfileSettings, on_result, energy,
                      context=None, on_e2e=None):
    """:func:`opcost.measure.profile.profile_configs` for the rotation cache states (placements only where two tiers are
    usable: the rotation row is the default placement's measurement). A group of sweep points
    (:func:`revisited`) is visited again after every other group, in reverse order, its two visits merged by
    :func:`merge_visits`."""
    tiers, placer = placement_tiers(settings.placement, device, needed=2)
    run = _Run(ModelCache(models_cfg, device, dtype), device, settings, energy, on_result, tiers, placer,
               host_facts(device), llc_bytes())
    groups = rotation_groups(configs, context, settings.rotation_size)
    guests = guest_workloads(configs if context is None else pd.concat([configs, context], ignore_index=True))
    t0, done, again = time.perf_counter(), 0, []
    total = len(configs) + sum(len(group) for group, _ in groups if revisited(group, settings))  # visits to make
    for g, (group, ctx) in enumerate(groups):
        if ctx:
            log.info("rotation group %d: %d configurations, %d more rotating untimed as context", g + 1, len(group),
                     len(ctx))
        iterations = references(group, guests, run.models) if settings.e2e_every > 0 and on_e2e is not None else {}
        first = _rotate(group, run.models, device, settings, energy, seed=g, context=ctx, iterations=iterations)
        for key, it in first.whole.items():
            if it.n:
                run.reference(key, it, group, first, on_e2e)
        if revisited(group, settings):
            again.append((g, group, ctx, first))
        else:
            run.emit(group, first)
        done += len(group)
        log.info("rotation group %d/%d: %d configurations in %.1f s (ETA %.0f s)", g + 1, len(groups), len(group),
                 time.perf_counter() - t0, (time.perf_counter() - t0) / done * (total - done))
    if again:
        log.info("visiting %d groups of sweep points again (%d configurations), at another moment of the machine",
                 len(again), sum(len(grp) for _, grp, _, _ in again))
    for g, group, ctx, first in reversed(again):
        second = _rotate(group, run.models, device, settings, energy, seed=len(groups) + g, context=ctx)
        run.emit(group, both_visits(first, second))
        done += len(group)
        log.info("rotation group %d/%d visited again: %d configurations (ETA %.0f s)", g + 1, len(groups), len(group),
                 (time.perf_counter() - t0) / done * (total - done))
    return frame(MEASUREMENTS, run.rows), frame(SAMPLES, run.samples)


def revisited(group: list[dict], settings: ProfileSettings) -> bool:
    """Whether a rotation group is visited twice: ``profile.visits`` > 1 and its configurations are sweep points'
    (:data:`opcost.model.sweep_points.PREFIX`). A machine that runs slow for seconds (a vCPU the hypervisor lends
    elsewhere: two-thread calls wait for the slow thread) gives a tight but wrong median that only another visit
    shows; a model's configurations are checked by its reference iteration timed in the same rounds, a sweep point's
    only by another visit, and the estimates for models never profiled rest on them."""
    return settings.visits > 1 and all(str(r.get("workload") or "").startswith(SWEEP_PREFIX) for r in group)


def both_visits(first: _Group, second: _Group) -> _Group:
    """``first`` with the two visits' results merged (:func:`merge_visits`), their attempts added; a configuration
    failed where neither measured it."""
    merged = merge_visits(first.results, second.results)
    return replace(first, results=merged, attempts={k: first.attempts.get(k, 0) + second.attempts.get(k, 0)
                                                    for k in set(first.attempts) | set(second.attempts)},
                   failed={k: v for k, v in {**second.failed, **first.failed}.items() if not merged.get(k)})


def merge_visits(first: dict, second: dict) -> dict:
    """Two visits' results of a group ({config_id: {(placement, phase): (verified, Measurement, energy)}}), merged
    as the back-to-back visits are (:func:`opcost.measure.back_to_back.pick`): where neither is noisy and they
    agree (:meth:`opcost.measure.timing.Measurement.agrees`), their samples pooled; else the one not noisy with the
    lower median (a machine slow for a whole visit makes it slower, never faster); both noisy: the less noisy."""
    out = {}
    for cid in {**first, **second}:
        a, b = first.get(cid, {}), second.get(cid, {})
        out[cid] = {key: pick([(*t, None) for t in (a.get(key), b.get(key)) if t is not None], 2)[0][:3]
                    for key in {**a, **b}}
    return out


@dataclass
class _Run:
    """What :func:`profile_rotation` shares between its groups: the models, the settings, the placements' tiers and
    what it has written (``rows``, ``samples``)."""
    models: ModelCache
    device: str
    settings: ProfileSettings
    energy: Callable
    on_result: Callable | None
    tiers: list
    placer: object
    facts: dict
    llc: int
    rows: list = field(default_factory=list)
    samples: list = field(default_factory=list)

    def reference(self, key: str, it, group: list[dict], g: _Group, on_e2e) -> None:
        """A model iteration timed in a group's rotation (``g``: its :class:`_Group`), to ``on_e2e`` as an `e2e` row
        of method `rotation`."""
        log.info("%s: model iteration in the rotation: median %.3g ms n=%d", key, it.median * 1e3, it.n)
        model, mode, batch = parse_workload_key(key)
        # the part of the workload's prediction this rotation measured: its reference's weight among rotations
        timed = sum(calls_in(row, key) * m.median for row in group
                    for (plc, _), (_, m, _) in g.results.get(row["config_id"], {}).items() if plc == DEFAULT)
        on_e2e(*e2e_frames((model, batch, mode), it, "rotation", self.device, timed_s=timed))

    def emit(self, group: list[dict], g: _Group) -> None:
        """The rows of a group's configurations from its rotation's results (``g``: :func:`_rotate`'s), each other
        placement measured back to back where two tiers are usable; each to ``on_result``."""
        results, failed, attempts, engine_of = g.results, g.failed, g.attempts, g.engine_of
        timing, fast = self.settings.timing, self.tiers[0].name if self.tiers else None
        for row in group:
            cid = row["config_id"]
            result = {k: (ver, m, e, self.settings.cache) for k, (ver, m, e) in results.get(cid, {}).items()}
            for (_, phase), (_, m, _, _) in result.items():
                log.info("%s %-14s %-8s median %.3g ms n=%d rel_ci=%.3f%s", cid, row["op_type"], phase,
                         m.median * 1e3, m.n, m.rel_ci, " NOISY" if m.noisy else "")
            if self.placer is not None and cid not in failed:
                pool, label = cold_pool(row, "cold", self.llc)
                try:
                    for plc, ver, ph, m, e in measure_config(row, self.models, self.device, timing, self.energy,
                                                              Placing(self.placer, self.tiers,
                                                                      self.settings.placement), pool):
                        result[(plc, ph)] = (ver, m, e, label)
                except Exception as e:
                    log.warning("%s %s placements failed: %s", cid, row["op_type"], e)
            out = result_rows(row, result or None, failed.get(cid), attempts.get(cid, 1), self.facts, fast,
                              engine_of.get(cid))
            self.rows += out[0]
            self.samples += out[1]
            if self.on_result is not None:
                self.on_result(*out)
