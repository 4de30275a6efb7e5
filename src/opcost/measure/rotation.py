"""The model-order rotation: one model iteration's operator calls, each timed alone, in the model's order.

Isolated profiling (:mod:`opcost.measure.profile`) times configurations in rotation
(:func:`measure_rotation`). In model order a round is one iteration's call sequence restricted
to the rotation's configurations (`configs` columns `positions`, `releases`, `feeds`): each operator follows its
predecessor in the model, is called as often as the model calls it, keeps its outputs alive as long as the model
does and, in inference, reads the outputs its producers wrote in the same round. In training a round is the
iteration's two passes: the forward calls in call order, then the backward calls in reverse order (each on the
graph its configuration's set-up retained), so that a backward call follows the backward of its consumer, as in the
iteration. A :class:`Rotation` holds what ``measure_rotation`` needs; :func:`model_order` and :func:`shuffled`
build one from members (:class:`Member`), :func:`with_engine_probes` appends the autograd engine's probes and
:func:`with_iterations` the whole model iteration that serves as the end-to-end reference (after its lead-in,
:func:`lead_in`); :func:`round_timer` runs single rounds for a caller that times them against something else.
"""
from __future__ import annotations

import bisect
import json
import logging
import math
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple, Sequence

import numpy as np

from opcost.measure.timing import FUTILITY_ROUNDS, Measurement, RotationError, TimingSettings, clock_for
from opcost.model.replay import refresher, tensors_of
from opcost.tables import CARRIED

log = logging.getLogger(__name__)


class Member(NamedTuple):
    """One timed callable of a rotation: a configuration's phase, its call and its untimed prepare step."""
    config_id: str
    phase: str
    call: Callable[[], object]
    prepare: Callable[[], None] | None


@dataclass(frozen=True)
class Rotation:
    """What :func:`measure_rotation` times: the callables, their untimed prepare steps, and the round's order
    (``sequence``, none: shuffled every round), frees (``release``), producer outputs (``feed``) and the rounds each
    callable runs in (``every``); see there."""
    calls: list
    prepare: list | None = None
    sequence: list[int] | None = None
    release: list[int] | None = None
    feed: list | None = None
    every: list[int] | None = None

    @property
    def shuffle(self) -> bool:
        return self.sequence is None

    def measure(self, settings: TimingSettings, device: str = "cpu", seed: int = 0,
                targets=None) -> list[Measurement]:
        return measure_rotation(self, settings, device, seed=seed, targets=targets)


def measure_rotation(rotation: Rotation, settings: TimingSettings = TimingSettings(), device: str = "cpu", *,
                     seed: int = 0, targets: Sequence[int] | None = None, clock=None) -> list[Measurement]:
    """Time ``rotation.calls`` (``fns`` below; ``prepare``, ``sequence``, ``every``, ``release`` and ``feed`` are
    the rotation's fields of those names) in rotation: a round calls each once, in an order shuffled per round
    (seeded: reproducible), timing each call alone; ``prepare[i]``, if given, runs untimed just before call i (e.g.
    rewrite its inputs, as their producer would have just before it in a model). Warm-up: at least
    ``warmup_calls`` rounds and ``warmup_s``. Then rounds in blocks of ``block``; stops when every callable in
    ``targets`` (default: all) has ``min_samples`` and a precise median (:attr:`Measurement.precise`), after
    ``max_samples`` rounds, when ``max_seconds`` x the number of targets is spent, or (after
    :data:`FUTILITY_ROUNDS` rounds) when no imprecise target could reach its precision in the rounds the caps leave
    (:meth:`Measurement.attainable`), so that a few wide distributions do not hold every operator to the cap; they stay
    flagged noisy (see :attr:`Measurement.noisy`), to be measured again. Every callable stays in
    the rotation until the end, so each keeps the same neighbours. Returns one Measurement per callable
    (``calls_per_sample`` 1, ``wall_s`` the rotation's wall time divided among the callables); raises
    :class:`RotationError` naming the callable that failed. A rotation with a ``sequence`` calls every round in
    that order (e.g. the model's call order, so that each operator follows its predecessor in the model); one without
    shuffles each round. ``sequence``: the
    callables' indices a round calls, in order, with repeats (a model iteration's call sequence: an operator called
    8 times in a row is timed 8 times in a row, as the model calls it); each call is one sample of its callable,
    and the stop rule counts rounds. Every callable must appear in it. ``every[i]`` (default 1): callable i is
    called (and timed) in every ``every[i]``-th round only, warm-up included (e.g. the whole model iteration,
    timed in the same minutes as its operators at a fraction of a round's cost). ``release`` (with a ``sequence``, one
    entry per entry of it): the index of the round entry whose call drops this entry's
    output, as the model frees an operator's output during or after its last consumer (its own index: dropped at
    once; an entry that does not run in a round drops its due outputs at the next one that does), right after that
    call: the allocator then hands each call memory as the model's live outputs leave it, instead of the buffer the
    previous call just freed. The frees are timed, added to the call's sample: the model pays them between its
    operators, and the trace-modelled overhead (T1 - T1r) cancels them out of its gaps. ``feed`` (with
    ``release``, one entry per entry of it): None, or ``(bind, producers)``: the call reads outputs of earlier
    entries of the same round (``producers``: their entry indices; each kept until its last reader has run); in
    place of ``prepare``, ``bind(outputs)`` runs untimed just before the call with those entries' outputs (None for
    one that did not run) and returns the function that undoes it, run untimed right after the call (the
    harness's own work, a few percent of a small model's operator sum if it were timed), so that an
    operator reads the memory its producer just wrote, as in the model; a fed output whose last reader this is
    is freed, timed, with the call's other frees."""
    if clock is None:
        clock = clock_for(device)
    n = len(rotation.calls)
    if n == 0:
        return []
    targets = list(range(n)) if targets is None else list(targets)
    one_round = _round_runner(rotation, clock, seed)
    samples: list[list[float]] = [[] for _ in range(n)]
    t_start = time.perf_counter()
    cap = settings.max_seconds * max(1, len(targets))  # per configuration measured, not per context callable

    rounds = 0
    while rounds < max(1, settings.warmup_calls) or time.perf_counter() - t_start < settings.warmup_s:
        one_round()
        rounds += 1
        if time.perf_counter() - t_start > cap / 2:
            break
    rounds, t_rounds = 0, time.perf_counter()
    while True:
        for _ in range(settings.block):
            for i, t in one_round():
                samples[i].append(t)
        rounds += settings.block
        ms = [Measurement(np.asarray(x), 1, 0.0, settings, rotation=True) for x in samples]
        short = [i for i in targets if not ms[i].precise]
        if rounds >= settings.min_samples and not short:
            why = "every target precise"
            break
        now = time.perf_counter()
        if rounds >= settings.max_samples or now - t_start >= cap:
            why = "cap"
            break
        if rounds >= max(settings.min_samples, FUTILITY_ROUNDS):  # stop when the rest cannot be made precise
            left = min(settings.max_samples - rounds, (t_start + cap - now) / ((now - t_rounds) / rounds))
            if not any(ms[i].attainable((rounds + left) / rounds) for i in short):
                why = "the imprecise ones could not reach the target before the cap"
                break
    log.info("rotation of %d callables stopped after %d rounds (%s; %d of %d targets imprecise)", n, rounds, why,
              len(short), len(targets))
    wall = time.perf_counter() - t_start
    for m in ms:
        m.wall_s = wall / n
    return ms


def round_timer(rotation: Rotation, device: str = "cpu", members: int | None = None) -> Callable[[], list[float]]:
    """A function that runs one round of ``rotation`` as :func:`measure_rotation` runs its rounds and returns the
    seconds of each call it timed (with the frees timed after it) of its first ``members`` callables (default: all),
    in call order: what the rotation records of one round, for a caller that times the rounds against something
    else (:func:`opcost.measure.glue.time_glue`)."""
    one = _round_runner(rotation, clock_for(device))
    last = len(rotation.calls) if members is None else members
    return lambda: [t for i, t in one() if i < last]


def _round_runner(rotation: Rotation, clock, seed: int = 0) -> Callable[[], list[tuple[int, float]]]:
    """The function that runs one round of ``rotation`` as :func:`measure_rotation` describes it (its order, prepare
    steps, frees and producer feeds) and returns each timed call's (callable index, seconds), in call order."""
    fns, prepare, sequence, every = rotation.calls, rotation.prepare, rotation.sequence, rotation.every
    release, feed, shuffle = rotation.release, rotation.feed, rotation.shuffle
    n = len(fns)
    prepare = list(prepare) if prepare is not None else [None] * n
    order = list(range(n)) if sequence is None else [int(i) for i in sequence]
    if sorted(set(order)) != list(range(n)):
        raise ValueError("sequence must call every callable (indices 0..n-1)")
    every = [1] * n if every is None else [max(1, int(k)) for k in every]
    if release is not None:
        release = [max(j, int(r)) for j, r in enumerate(release)]
        if sequence is None or shuffle or len(release) != len(order):
            raise ValueError("release needs an unshuffled sequence and one entry per sequence entry")
    last_read: dict[int, int] = {}  # producer entry -> the last entry that reads its outputs
    if feed is not None:
        if release is None or len(feed) != len(order):
            raise ValueError("feed needs a release and one entry per sequence entry")
        for j, f in enumerate(feed):
            for p in (f[1] if f is not None else ()):
                if not 0 <= p < j:
                    raise ValueError(f"sequence entry {j} reads entry {p}, which does not run before it")
                last_read[p] = j
    reads_at: dict[int, list[int]] = {}  # entry -> producers whose outputs are no longer needed after it
    for p, j in last_read.items():
        reads_at.setdefault(j, []).append(p)
    rng = random.Random(seed)
    counter = [0]  # rounds run so far, warm-up included

    def one_round() -> list[tuple[int, float]]:
        if shuffle:
            rng.shuffle(order)
        k = counter[0]
        counter[0] += 1
        held: dict[int, list] = {}  # round entry -> outputs its call drops
        outs: dict[int, object] = {}  # round entry -> its output, while a later entry still reads it (feed)
        due = 0  # the next round entry whose outputs have not been handed to a call to drop
        timed: list[tuple[int, float]] = []
        for j, i in enumerate(order):
            if k % every[i]:
                continue
            undo, read = None, []
            if feed is not None and feed[j] is not None:
                undo = feed[j][0]([outs.get(p) for p in feed[j][1]])
                read = [outs.pop(p, None) for p in reads_at.get(j, ())]  # no later call reads them
            elif prepare[i] is not None:
                prepare[i]()
            try:
                if release is None:
                    t = clock.time_block(fns[i], 1)
                else:
                    t, out = clock.time_call(fns[i])
                    dead = [o for r in range(due, j + 1) for o in held.pop(r, ())] + read  # what the model drops
                    due = j + 1
                    del read
                    if undo is not None:
                        undo()  # untimed: the harness puts the call's own inputs back
                    if j in last_read:
                        outs[j] = out
                    if release[j] > j:
                        held.setdefault(release[j], []).append(out)
                    else:
                        dead.append(out)
                    del out
                    t += clock.time_free(dead)  # timed: the frees, where the model frees
            except Exception as e:
                raise RotationError(i, e) from e
            timed.append((i, t))
        held.clear()  # outputs alive at the iteration's end
        outs.clear()
        return timed

    return one_round


def shuffled(members: list[Member]) -> Rotation:
    """Each member once per round, in an order shuffled every round."""
    return Rotation([m.call for m in members], [m.prepare for m in members])


def model_order(members: list[Member], rows: list[dict], reps: dict | None = None, feed: bool = False) -> Rotation:
    """Rounds in the model's call order (``rows``: the `configs` rows of the members' configurations); with
    ``feed`` (inference, ``cache: fresh``) each forward call reads its producers' outputs of the same round
    (``reps``: config_id -> :class:`opcost.model.replay.Replay`)."""
    positions = {r["config_id"]: call_positions(r) for r in rows}
    releases = {r["config_id"]: call_releases(r) for r in rows}
    sequence, release = model_sequence(members, positions, releases)
    fed = producer_feed(members, reps or {}, positions, {r["config_id"]: call_feeds(r) for r in rows}) \
        if feed else None
    return Rotation([m.call for m in members], [m.prepare for m in members], sequence, release, fed)


def with_iterations(rotation: Rotation, iterations: list[Callable[[], object]], every: int,
                    leads: list[Callable[[], object]] | None = None) -> Rotation:
    """``rotation`` with whole model ``iterations`` appended as end-to-end references, the last callables
    (:data:`ITERATION_CALLS` of each, in turn). Model order: every ``every``-th round closes, for each model, with
    its lead-in (``leads``, from :func:`lead_in`; default: one iteration), which finds the state the round left,
    then the iteration timed as the reference, which finds the model's own (a run's iterations follow each other),
    both reading no operator's output. Shuffled rounds: one iteration of each, anywhere in the round."""
    n, per = len(rotation.calls), ITERATION_CALLS[rotation.shuffle]
    leads = list(iterations) if leads is None else list(leads)
    calls = [c for it, lead in zip(iterations, leads) for c in ((lead, it) if per == 2 else (it,))]
    k = len(calls)
    sequence, release = rotation.sequence, rotation.release
    if sequence is not None:
        sequence, release = sequence + list(range(n, n + k)), release + list(range(len(sequence), len(sequence) + k))
    return replace(rotation, calls=rotation.calls + calls, prepare=rotation.prepare + [None] * k,
                   sequence=sequence, release=release,
                   feed=None if rotation.feed is None else rotation.feed + [None] * k,
                   every=[1] * n + [every] * k)


LEAD_S = 0.005  # a rotation's reference iteration follows iterations of its own model lasting at least this long
MAX_LEAD = 16  # and at most this many


def lead_in(iteration: Callable[[], object], device: str = "cpu", lead_s: float = LEAD_S,
            most: int = MAX_LEAD) -> Callable[[], object]:
    """What runs before a rotation's reference ``iteration`` (:func:`with_iterations`): the iteration itself, as
    often as lasts ``lead_s`` (timed once here, after a call of its own; at least once, at most ``most`` times).
    One iteration after a round leaves a millisecond-scale model colder than a run of it: a decode step of a small
    decoder, whose Python glue is a third of its time, ran 4-32% slower as the second of two iterations after a
    round than in a loop of steps, and as fast as the loop after five (benchmarks/records/measurements.md)."""
    clock = clock_for(device)
    clock.time_block(iteration, 1)
    once = max(clock.time_block(iteration, 1), 1e-9)
    times = max(1, min(most, math.ceil(lead_s / once)))
    if times == 1:
        return iteration

    def lead() -> None:
        for _ in range(times):
            iteration()

    return lead


ITERATION_CALLS = {False: 2, True: 1}  # calls of each model iteration per timed round: model order, shuffled


ENGINE_PROBE_REPEATS = 3  # calls of each engine probe per round, in turn


def with_engine_probes(rotation: Rotation, one: Callable[[], object], many: Callable[[], object],
                       repeats: int = ENGINE_PROBE_REPEATS) -> Rotation:
    """``rotation`` with the two engine probes (:func:`opcost.measure.engine.engine_probes`) appended as its last two
    callables. Model order: every round ends with them called in turn ``repeats`` times, each dropping its output at
    once, so that they measure the engine's fixed cost per call in the same minutes and process state as the
    rotation's backward calls, warmed by each other as the model's backward nodes are by their neighbours (a probe
    called once after a forward call reads its own graph from cold memory, and overstated the cost per call by
    15–40 µs, docs/methodology.md, section 8). Shuffled rounds: each once, anywhere in the round."""
    n = len(rotation.calls)
    calls, prepare = rotation.calls + [one, many], rotation.prepare + [None, None]
    every = None if rotation.every is None else rotation.every + [1, 1]
    if rotation.sequence is None:
        return replace(rotation, calls=calls, prepare=prepare, every=every)
    start, added = len(rotation.sequence), 2 * repeats
    return replace(rotation, calls=calls, prepare=prepare, every=every,
                   sequence=rotation.sequence + [n, n + 1] * repeats,
                   release=None if rotation.release is None else rotation.release + list(range(start, start + added)),
                   feed=None if rotation.feed is None else rotation.feed + [None] * added)


def first_call(row: dict) -> int:
    """A configuration's position in its workload's call order (column `order`; 0 where unknown)."""
    o = row.get("order")
    return int(o) if isinstance(o, (int, np.integer)) else 0


def call_positions(row: dict) -> list[int]:
    """The positions of a configuration's calls in its workload's call sequence (column `positions`; the first
    call's rank alone in older catalogues)."""
    p = row.get("positions")
    return [int(x) for x in json.loads(p)] if isinstance(p, str) else [first_call(row)]


def call_releases(row: dict) -> list[int]:
    """Per entry of :func:`call_positions`: the position during or after which the model drops that call's outputs
    (column `releases`; older catalogues: the call's own position, dropped at once)."""
    r = row.get("releases")
    return [int(x) for x in json.loads(r)] if isinstance(r, str) else call_positions(row)


def call_feeds(row: dict) -> list | None:
    """Per entry of :func:`call_positions`: per tensor input, the [position, output index] that produced it, or None
    (column `feeds`; None for older catalogues)."""
    f = row.get("feeds")
    return json.loads(f) if isinstance(f, str) else None


def _calls(members: list[tuple], positions: dict[str, list[int]],
           releases: dict[str, list[int]] | None = None) -> tuple[list[int], list[int], list[int], list[int]]:
    """(sequence, at, until, rank): per entry of one model iteration (see :func:`model_sequence`), the member it calls,
    the call's position, the position where the model drops its outputs, and the call's rank among its
    configuration's `positions`."""
    by_config: dict[str, list[int]] = {}
    for i, m in enumerate(members):
        by_config.setdefault(m[0], []).append(i)
    calls = sorted((p, r, cid, k) for cid in by_config
                   for k, (p, r) in enumerate(zip(positions[cid], (releases or {}).get(cid, positions[cid]))))
    sequence, at, until, rank = [], [], [], []
    for p, r, cid, k in calls:
        sequence += by_config[cid]
        at += [p] * len(by_config[cid])
        until += [r] * len(by_config[cid])
        rank += [k] * len(by_config[cid])
    return sequence, at, until, rank


def model_sequence(members: list[tuple], positions: dict[str, list[int]],
                   releases: dict[str, list[int]] | None = None) -> tuple[list[int], list[int]]:
    """One model iteration as indices into ``members`` ((config_id, phase, ...) tuples): every call position of
    every member's configuration, in call order, each configuration's non-backward phases together, then (training)
    the backward calls in reverse call order, as the iteration's backward pass runs them after its forward pass;
    and per entry the entry whose call drops its outputs (:func:`measure_rotation`'s
    ``release``): for a forward entry the last forward entry at or before the position where the model drops them
    (``releases``, per configuration parallel to ``positions``; default: at once), never before the entry itself;
    a backward entry drops its gradients at once."""
    sequence, at, until, _ = _calls(members, positions, releases)
    back = [m[1] == "backward" for m in members]
    ahead = [j for j, i in enumerate(sequence) if not back[i]]
    forward_at = [at[j] for j in ahead]
    release = [max(k, bisect.bisect_right(forward_at, until[j]) - 1) for k, j in enumerate(ahead)]
    backward = [sequence[j] for j in reversed(range(len(sequence))) if back[sequence[j]]]
    start = len(ahead)
    return [sequence[j] for j in ahead] + backward, release + list(range(start, start + len(backward)))


def producer_feed(members: list[tuple], reps: dict[str, object], positions: dict[str, list[int]],
                  feeds: dict[str, list | None]) -> list:
    """:func:`measure_rotation`'s ``feed`` for the iteration :func:`model_sequence` builds from
    the same arguments: each forward call reads the outputs of the calls that produced its inputs in the model (column
    `feeds`), where the producer is in the rotation and the replay can take them (``reps``: config_id ->
    :class:`opcost.model.replay.Replay`); an input the workload carries between iterations (`feeds` entry
    :data:`opcost.tables.CARRIED`: a decode step's cached keys and values) is each call's own copy, left as
    the round before left it, never rewritten, so that the bytes a round moves between two reads of it are the
    iteration's, as in the model (a cache the iteration's traffic evicts is read from memory, as generation reads it);
    its other inputs are rewritten as ``cache: fresh`` rewrites them. None for an entry that reads neither."""
    sequence, at, _, rank = _calls(members, positions)
    entry_at = {}  # position -> the entry of its forward call
    for j, (i, p) in enumerate(zip(sequence, at)):
        if members[i][1] == "forward":
            entry_at.setdefault(p, j)
    plan = []
    for j, (i, p, k) in enumerate(zip(sequence, at, rank)):
        cid, phase = members[i][0], members[i][1]
        rep, per_call = reps.get(cid), feeds.get(cid)
        srcs = per_call[k] if per_call is not None and k < len(per_call) else []
        if phase != "forward" or rep is None or not rep.slots or not srcs:
            plan.append(None)
            continue
        producers, wiring = [], []  # entries read; per input: (index into producers, output index), CARRIED or None
        for inp, slot in enumerate(rep.slots):
            src = srcs[inp] if inp < len(srcs) else None
            if src == CARRIED:
                wiring.append(CARRIED)
                continue
            e = entry_at.get(src[0]) if isinstance(src, list) and slot is not None else None
            if e is None or e >= j:
                wiring.append(None)
                continue
            if e not in producers:
                producers.append(e)
            wiring.append((producers.index(e), int(src[1])))
        plan.append((_binder(rep, wiring, k), producers) if producers or CARRIED in wiring else None)
    return plan


def _binder(rep, wiring: list, rank: int = 0) -> Callable[[list], Callable[[], None]]:
    """``bind(outputs)`` for :func:`producer_feed`: puts each wired producer output in its input's place (once checked
    to have the recorded shape, dtype, strides and device; else the input keeps its own tensor) and each carried
    input's copy of this call (``rank``: the call's rank among its configuration's calls; rank 0 reads the replay's
    own tensor, the others a copy made here; a carried input the replay cannot replace is left as it is, never
    rewritten either), rewrites the other inputs as :func:`opcost.model.replay.refresher` does,
    and returns the function that puts the inputs back."""
    originals = list(rep.inputs)
    fits: dict[int, bool] = {}  # input -> the producer output has the input's layout (checked on first bind)
    rewrite = refresher([t for t, w in zip(originals, wiring) if w is None])
    copies = {k: originals[k].clone() for k, w in enumerate(wiring)
              if w == CARRIED and rank and rep.slots[k] is not None}

    def bind(outputs: list) -> Callable[[], None]:
        bound, own = list(copies), []
        for k, copy in copies.items():
            rep.slots[k](copy)
        for k, w in enumerate(wiring):
            if w is None or w == CARRIED:
                continue
            ts = tensors_of(outputs[w[0]]) if outputs[w[0]] is not None else []
            t = ts[w[1]] if w[1] < len(ts) else None
            if t is not None and k not in fits:
                o = originals[k]
                fits[k] = (t.shape == o.shape and t.dtype == o.dtype and t.stride() == o.stride()
                           and t.device == o.device)
            if t is not None and fits[k]:
                rep.slots[k](t)
                bound.append(k)
            else:
                own.append(originals[k])
        if rewrite is not None:
            rewrite()
        if own:  # a producer output that did not fit: the input is rewritten instead
            again = refresher(own)
            if again is not None:
                again()

        def undo() -> None:
            for k in bound:
                rep.slots[k](originals[k])
        return undo
    return bind


def both(first: Callable[[], None] | None, then: Callable[[], None] | None) -> Callable[[], None] | None:
    """One untimed step that runs ``first`` then ``then`` (either may be None)."""
    if first is None or then is None:
        return first or then

    def run_both() -> None:
        first()
        then()
    return run_both
