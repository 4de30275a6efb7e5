"""Simultaneous placement profiling: many layers measured under different memory placements in one model run.

Isolated placement profiling (:mod:`opcost.measure.profile`) times each (configuration, placement) pair alone. Here the
placements are measured inside real inference iterations instead, several layers at a time:

* a *layer* is one leaf-module call position of the iteration (from :func:`opcost.model.extract.record_calls`); the
  placements it must cover are :func:`opcost.measure.placement.plan` for its tensor inputs, parameters and output (with
  the same rule for in-place/view modules as isolated profiling: the output sits on the aliased input's tier);
* :func:`schedule` packs them greedily into *rounds*: per round each layer gets at most one placement not yet
  covered, and two layers closer than ``gap`` leaf calls (by default: neighbours, i.e. producer and consumer) never
  both get a non-baseline one; layers of one shared module never need different parameter tiers in one round; the
  baseline (all on the fast tier) is compatible with everything. Rounds are repeated until all are covered;
* running a round (:func:`profile_coplace`): the scheduled layers' parameters and buffers are copied onto their
  ``w`` tier for the round (put back after it); a forward pre-hook copies each scheduled call's tensor inputs onto
  its input tiers and only then starts the layer's timer; the forward hook stops the timer, binds the output's
  memory to the ``out`` tier during the warm-up iterations (the allocator hands the same memory to that call in
  the next iteration; the output is kept alive until then so no other tensor reuses it; binding migrates pages, a
  disturbance kept out of the timed iterations) and the bindings are undone after the round. Each scheduled
  call is timed (``perf_counter``; CUDA synchronised) over timed iterations after warm-up, until every (config,
  placement) group of the round has ``min_samples`` samples and meets ``target_rel_ci``, or ``max_seconds`` /
  ``max_samples`` is reached (single-call samples of small operators rarely meet the target, so a round usually
  lasts ``max_seconds``: the wall time is about rounds x ``max_seconds``). Layers a round does not schedule run
  untouched and untimed; a layer scheduled at the baseline still reads copies of its inputs on the fast tier, not
  its neighbour's output on a slow one. Where every tensor really was is checked after the round, as isolated
  profiling does.

Rows share the `measurements` schema with ``source = coplace``: one row per (configuration, placement), over all
calls of the configuration measured with that placement (single-call samples).

Limitations: inference only (no backward placement); only leaf-module calls are placed, functional operators
(residual adds, ``flatten``, functional activations...) run on default memory and are not timed here; a module
that relies on an in-place side effect on its argument without using the returned tensor sees the placed copy
modified instead of its argument; as in isolated profiling, outputs are bound to CPU (NUMA) tiers only (on GPUs the
placements keep outputs on the fast tier, where the device allocator puts them).
"""
from __future__ import annotations

import itertools
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from opcost.errors import OpcostError
from opcost.measure.energy import NoMeter, missing
from opcost.measure.hostinfo import host_facts, now
from opcost.measure.placement import (
    Placement,
    Placer,
    aliased_input,
    mbind,
    output_tier,
    plan,
    storages,
    usable_tiers,
)
from opcost.measure.placement import Settings as PlacementSettings
from opcost.measure.profiling import matches_all
from opcost.measure.timing import Measurement, TimingSettings, clock_for
from opcost.model import fastpath
from opcost.model.extract import Capture, leaf_modules, record_calls
from opcost.model.replay import map_tensors, place_params, tensor_inputs, tensors_of
from opcost.model.workload import Workload, workload_key
from opcost.tables import MEASUREMENTS, frame

log = logging.getLogger(__name__)
SOURCE = "coplace"


@dataclass
class Layer:
    """One leaf-module call position of the iteration and the placements it must cover."""

    index: int  # position among the iteration's leaf-module calls
    config_id: str
    op_type: str
    path: str
    module: torch.nn.Module
    n_inputs: int
    has_params: bool
    alias: int | None  # input whose memory the output is (in-place or view module), if any
    placements: list[Placement] = field(default_factory=list)


def is_baseline(p: Placement, fast: str) -> bool:
    return p.all_on(fast)


# --- the schedule ------------------------------------------------------------------------------------------------


def schedule(placements: list[list[Placement]], fast: str, gap: int = 2, owners: list | None = None
             ) -> list[dict[int, Placement]]:
    """Rounds covering every placement of every layer: ``rounds[r][i]`` is layer i's placement in round r (layers
    absent from a round run untouched and untimed). Layers are in call order; two layers less than ``gap`` calls
    apart never both get a non-baseline placement in one round (``gap=1``: no restriction); layers with the same
    ``owners`` entry (one module called at several positions) never get different parameter tiers in one round.

    Greedy: per round, layers with the most non-baseline placements left choose first (ties: call order), each
    taking its first placement that fits; then every layer left out takes its baseline if not yet covered.
    Guarantee (without parameter-tier conflicts, e.g. ``params: fixed``): a layer that is neither served nor
    finished in a round was blocked by a neighbour served a non-baseline placement, so the number of rounds is at
    most ``max_i(len(placements[i]) + sum of the non-baseline counts of i's neighbours)`` <= ``(M + 1) + 2 (gap - 1)
    M`` for at most M non-baseline placements per layer; on a chain of equal layers with ``gap=2`` it is ``2 M``."""
    owners = owners if owners is not None else list(range(len(placements)))
    todo_nb = [[p for p in ps if not is_baseline(p, fast)] for ps in placements]
    todo_base = [[p for p in ps if is_baseline(p, fast)][:1] for ps in placements]
    rounds: list[dict[int, Placement]] = []
    reach = max(0, gap - 1)
    while any(todo_nb) or any(todo_base):
        assign: dict[int, Placement] = {}
        blocked: set[int] = set()
        w_tier: dict = {}  # owner -> parameter tier this round

        def fits(i: int, p: Placement) -> bool:
            return p.params is None or w_tier.get(owners[i], p.params) == p.params

        def take(i: int, p: Placement) -> None:
            assign[i] = p
            if p.params is not None:
                w_tier[owners[i]] = p.params

        order = sorted((i for i in range(len(placements)) if todo_nb[i]), key=lambda i: (-len(todo_nb[i]), i))
        for i in order:
            if i in blocked:
                continue
            p = next((p for p in todo_nb[i] if fits(i, p)), None)
            if p is None:
                continue
            take(i, p)
            todo_nb[i].remove(p)
            blocked.update(range(i - reach, i + reach + 1))
        for i, base in enumerate(todo_base):
            if base and i not in assign and fits(i, base[0]):
                take(i, base.pop())
        if not assign:  # cannot happen: a first layer with work always fits an empty round
            raise OpcostError("coplace", "schedule made no progress")
        rounds.append(assign)
    return rounds


# --- layers of a workload -----------------------------------------------------------------------------------------


def _map_inputs(args, kwargs, fn):
    """(args, kwargs) with tensor k (in :func:`opcost.model.replay.tensor_inputs` order) replaced by ``fn(k,
    tensor)``."""
    k = itertools.count()
    return map_tensors(tuple(args), lambda t: fn(next(k), t)), map_tensors(dict(kwargs), lambda t: fn(next(k), t))


def _probe(wl: Workload, count: int) -> list[tuple[int, bool, int | None]]:
    """(tensor inputs, has parameters, aliased input) per leaf-module call, from one plain iteration."""
    found: list[tuple[int, bool, int | None]] = []
    depth, inputs = [0], [[]]

    def pre(mod, args, kwargs):
        if depth[0] == 0:
            inputs[0] = tensor_inputs(args, kwargs)
        depth[0] += 1

    def post(mod, args, out):
        depth[0] -= 1
        if depth[0] == 0:
            alias = aliased_input(inputs[0], tensors_of(out))
            found.append((len(inputs[0]), bool(list(mod.parameters()) + list(mod.buffers())), alias))

    handles = []
    for m in leaf_modules(wl.model.module):
        handles += fastpath.watch_calls(m, pre, post, pre_kwargs=True)
    try:
        with wl.grad_context():
            wl.forward()
    finally:
        for h in handles:
            h.remove()
    if len(found) != count:
        raise OpcostError(f"model {wl.model.name}", f"leaf-module calls per iteration changed from {count} to "
                                                    f"{len(found)} (data-dependent control flow?)")
    return found


def layers_of(wl: Workload, tiers: list[str], settings: PlacementSettings, capture: Capture | None = None,
              out_tier: str | None = None) -> list[Layer]:
    """The leaf-module calls of one iteration, each with the placements to cover (as isolated profiling plans them
    for its configuration; ``out_tier``: the tier outputs land on where they cannot be bound, see
    :func:`~opcost.measure.placement.output_tier`)."""
    cap = capture or record_calls(wl)
    ids = cap.config_ids(wl.mode)
    calls = [(c, cid) for c, cid in zip(cap.calls, ids) if c.scope == "module"]
    probed = _probe(wl, len(calls))
    out = []
    for k, ((call, cid), (n_in, has_params, alias)) in enumerate(zip(calls, probed)):
        plans = plan(n_in, has_params, tiers, settings.params, settings.max_per_config, alias, out_tier)
        out.append(Layer(k, cid, call.op_type, call.path, wl.model.module.get_submodule(call.path), n_in,
                         has_params, alias, plans))
    return out


# --- running one round ----------------------------------------------------------------------------------------------


class _Round:
    """Hooks on every leaf module for one round: place inputs, time, bind outputs of the scheduled calls."""

    def __init__(self, wl: Workload, layers: list[Layer], assign: dict[int, Placement], placer: Placer, clock):
        self.layers, self.assign, self.placer, self.clock, self.mark = layers, assign, placer, clock, clock.mark
        self.depth, self.k, self.cur = 0, 0, -1
        self.timing = False
        self.t0 = None
        self.samples: dict[int, list[float]] = defaultdict(list)
        self.placed: dict[int, list[torch.Tensor]] = {}  # call -> its placed input copies (reused every iteration)
        self.held: dict[int, list[torch.Tensor]] = {}  # call -> last outputs, alive until its next call
        self.bound: set[tuple[int, int, str]] = set()  # (address, bytes, tier) ranges bound to an output tier
        self.handles = []
        for m in leaf_modules(wl.model.module):
            self.handles += fastpath.watch_calls(m, self._pre, self._post, pre_kwargs=True)

    def _copy(self, i: int, plc: Placement):
        cache = self.placed.setdefault(i, [])

        def one(j: int, t: torch.Tensor) -> torch.Tensor:
            old = cache[j] if j < len(cache) else None
            if old is not None and old.shape == t.shape and old.stride() == t.stride() and old.dtype == t.dtype \
                    and old.device == t.device:
                with torch.no_grad():
                    old.copy_(t)
                return old
            new = self.placer.place(t, plc.inputs[j])
            if j < len(cache):
                cache[j] = new
            else:  # tensors come in order: j == len(cache)
                cache.append(new)
            return new

        return one

    def _pre(self, mod, args, kwargs):
        if self.depth == 0:
            self.cur, self.k = self.k, self.k + 1
            plc = self.assign.get(self.cur)
            self.depth += 1
            if plc is None:
                return None
            self.held.pop(self.cur, None)  # frees last iteration's output memory for this call's new output
            args, kwargs = _map_inputs(args, kwargs, self._copy(self.cur, plc))
            self.t0 = self.mark()  # after the copies: they are not timed
            return args, kwargs
        self.depth += 1
        return None

    def _post(self, mod, args, out):
        self.depth -= 1
        if self.depth or self.cur not in self.assign:
            return
        t = self.clock.seconds(self.t0, self.mark())
        if self.timing:
            self.samples[self.cur].append(t)
        plc = self.assign[self.cur]
        outs = tensors_of(out)
        self.held[self.cur] = outs
        if self.timing:  # binding is a syscall that disturbs the machine (page migration): warm-up only
            return
        inputs = storages(self.placed.get(self.cur, []))
        for o in outs:
            st = o.untyped_storage()
            if st.data_ptr() not in inputs and st.nbytes():
                self.placer.bind_output(o, plc.out)
                self.bound.add((st.data_ptr(), st.nbytes(), plc.out))

    def verify(self, i: int) -> str:
        layer = self.layers[i]
        params = list(layer.module.parameters()) + list(layer.module.buffers())
        return str(Placement(tuple(self.placer.where(t) for t in self.placed.get(i, [])),
                             self.placer.where_all(params) if layer.has_params else None,
                             self.placer.where_all(self.held.get(i, []))))

    def close(self, fast: str) -> None:
        for h in self.handles:
            h.remove()
        self.held.clear()
        self.placed.clear()
        for addr, nbytes, name in self.bound:  # memory the allocator keeps: back to the default policy
            if self.placer.tiers[name].kind == "numa":
                try:
                    mbind(addr, nbytes, None, move=True)
                except OSError:  # unmapped since (a large block given back to the OS): nothing to undo
                    pass


def _run_round(wl: Workload, layers: list[Layer], assign: dict[int, Placement], placer: Placer,
               settings: TimingSettings, clock, fast: str) -> tuple[dict[int, list[float]], dict[int, str], int]:
    """Samples and verified placement per scheduled call, and the timed iterations of one round."""
    restores = []
    done_modules: set[int] = set()
    for i, plc in assign.items():
        mod = layers[i].module
        if plc.params is not None and id(mod) not in done_modules:
            done_modules.add(id(mod))
            restores.append(place_params(mod, plc.params, placer))
    rnd = _Round(wl, layers, assign, placer, clock)
    groups: dict[tuple[str, Placement], list[int]] = defaultdict(list)
    for i, plc in assign.items():
        groups[(layers[i].config_id, plc)].append(i)
    try:
        t_start = time.perf_counter()
        warmup, timed = max(2, settings.warmup_calls), 0  # outputs bound in the first, landing there next
        for it in range(warmup + settings.max_samples):
            rnd.timing = it >= warmup
            rnd.k, rnd.depth = 0, 0
            with wl.grad_context():
                wl.forward()
            if rnd.k != len(layers):
                raise OpcostError(f"model {wl.model.name}", f"leaf-module calls per iteration changed from "
                                  f"{len(layers)} to {rnd.k} (data-dependent control flow?)")
            timed += int(rnd.timing)
            if timed < settings.min_samples:
                continue
            if time.perf_counter() - t_start >= settings.max_seconds:
                break
            if timed % max(1, settings.block) == 0 and all(
                    Measurement(np.asarray([t for i in idx for t in rnd.samples[i]]), 1, 0.0, settings).rel_ci
                    <= settings.target_rel_ci for idx in groups.values()):
                break
        verified = {i: rnd.verify(i) for i in assign}
        return dict(rnd.samples), verified, timed
    finally:
        rnd.close(fast)
        for restore in reversed(restores):  # a weight tied between modules ends on its original tensor
            restore()


# --- the whole profiling -----------------------------------------------------------------------------------------


def profile_coplace(wl: Workload, settings: TimingSettings, device: str, placement: PlacementSettings,
                    capture: Capture | None = None, gap: int = 2) -> tuple[pd.DataFrame, dict]:
    """Every placement of every leaf-module call of ``wl`` (inference), measured in co-placed rounds. Returns
    (`measurements` rows with ``source = coplace``, a summary: rounds, layers, placements covered, wall seconds, and
    an estimate of what isolated profiling of the same (configuration, placement) pairs costs)."""
    if wl.mode != "inference":
        raise OpcostError("coplace", f"simultaneous placement profiling runs inference only, not {wl.mode}")
    t_start = time.perf_counter()
    tiers, skipped = usable_tiers(placement, device) if placement.enabled else ([], {})
    if not tiers:
        raise OpcostError("coplace", "no usable placement tier" + (f" ({'; '.join(skipped.values())})"
                                                                     if skipped else " configured"))
    fast = tiers[0].name
    placer = Placer(tiers, device)
    clock = clock_for(device)
    layers = layers_of(wl, [t.name for t in tiers], placement, capture, output_tier(tiers, device))
    log.info("layers found in %.2f s", time.perf_counter() - t_start)
    rounds = schedule([la.placements for la in layers], fast, gap, owners=[id(la.module) for la in layers])
    log.info("%s: %d leaf-module calls, %d placements to cover, %d rounds", wl.model.name, len(layers),
             sum(len(la.placements) for la in layers), len(rounds))
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    verified: dict[tuple[str, str], list[str]] = defaultdict(list)
    iterations = 0
    for r, assign in enumerate(rounds, 1):
        t_round = time.perf_counter()
        got, ver, timed = _run_round(wl, layers, assign, placer, settings, clock, fast)
        iterations += timed
        for i, plc in assign.items():
            key = (layers[i].config_id, str(plc))
            samples[key] += got.get(i, [])
            verified[key].append(ver[i])
        log.info("round %d/%d: %d calls placed (%d off the fast tier), %d timed iterations, %.2f s", r, len(rounds),
                 len(assign), sum(not is_baseline(p, fast) for p in assign.values()), timed,
                 time.perf_counter() - t_round)
    wall = time.perf_counter() - t_start
    op_type = {la.config_id: la.op_type for la in layers}
    facts = host_facts(device)
    rows = []
    for (cid, plc), ts in samples.items():
        m = Measurement(np.asarray(ts), 1, wall, settings)
        vers = verified[(cid, plc)]
        bad = [v for v in vers if not matches_all(plc, v)]
        rows.append({**dict.fromkeys(MEASUREMENTS.names), "config_id": cid, "op_type": op_type[cid], "mode": wl.mode,
                     "source": SOURCE,
                     "phase": "forward", "workload": workload_key(wl.model.name, wl.mode, wl.batch),
                     "status": "ok", "placement": plc, "placement_verified": (bad or vers)[0],
                     "placement_ok": not bad, "baseline": is_baseline(Placement.parse(plc), fast), "cache": None,
                     "engine_s": None, **facts,
                     **m.stats(), **missing(NoMeter()), "attempts": 1, "timestamp": now()})
    meas = frame(MEASUREMENTS, rows)
    summary = {"workload": workload_key(wl.model.name, wl.mode, wl.batch), "device": device,
               "tiers": [t.name for t in tiers], "skipped_tiers": skipped, "gap": gap, "rounds": len(rounds),
               "layers": len(layers), "configs": len(op_type),
               "layer_placements": sum(len(la.placements) for la in layers),
               "max_placements_per_layer": max((len(la.placements) for la in layers), default=0),
               "placements": len(meas), "placement_mismatches": int((~meas["placement_ok"].astype(bool)).sum()),
               "timed_iterations": iterations, "wall_s": wall,
               "isolated_estimate_s": isolated_estimate(meas, settings)}
    summary["speedup_estimate"] = summary["isolated_estimate_s"] / wall if wall > 0 else None
    return meas, summary


def isolated_estimate(meas: pd.DataFrame, settings: TimingSettings) -> float:
    """Seconds isolated profiling would spend on the same (configuration, placement) pairs, estimated from their
    medians: per pair a warm-up of ``max(warmup_s, warmup_calls x median)`` and one block per ``block`` samples up to
    ``min_samples``, each sample at least ``min_sample_s`` long, capped by ``max_seconds``. A lower bound: it leaves
    out building and placing the replayed call and any sampling beyond ``min_samples``."""
    total = 0.0
    blocks = math.ceil(settings.min_samples / max(1, settings.block)) * max(1, settings.block)
    for med in meas["median_s"].dropna().astype(float):
        warm = max(settings.warmup_s, settings.warmup_calls * med)
        total += min(settings.max_seconds, warm + blocks * max(settings.min_sample_s, med))
    return float(total)


def compare(coplace_rows: pd.DataFrame, isolated_rows: pd.DataFrame) -> pd.DataFrame:
    """Co-placed against isolated timings per (config_id, placement) present in both (forward, status ok): medians,
    their ratio, and each source's slowdown against its own all-fast-tier baseline of the configuration (the
    quantity placement decisions use) and the ratio of the slowdowns."""
    cols = ["config_id", "op_type", "placement", "baseline", "coplace_s", "isolated_s", "ratio",
            "slowdown_coplace", "slowdown_isolated", "slowdown_ratio", "placement_ok"]

    def prep(df: pd.DataFrame, name: str) -> pd.DataFrame:
        d = df[(df["status"] == "ok") & (df["phase"] == "forward") & (df["placement"] != "default")]
        g = d.groupby(["config_id", "placement"], as_index=False).agg(
            op_type=("op_type", "first"), baseline=("baseline", "first"), s=("median_s", "median"),
            ok=("placement_ok", lambda s: bool(s.fillna(False).all())))
        base = g[g["baseline"].fillna(False).astype(bool)].groupby("config_id")["s"].median()
        g["slowdown"] = g["s"].astype(float) / g["config_id"].map(base).astype(float)
        return g.rename(columns={"s": f"{name}_s", "slowdown": f"slowdown_{name}", "ok": f"ok_{name}"})

    if coplace_rows.empty or isolated_rows.empty:
        return pd.DataFrame(columns=cols)
    a, b = prep(coplace_rows, "coplace"), prep(isolated_rows, "isolated")
    j = a.merge(b.drop(columns=["op_type", "baseline"]), on=["config_id", "placement"], how="inner")
    j["ratio"] = j["coplace_s"].astype(float) / j["isolated_s"].astype(float)
    j["slowdown_ratio"] = j["slowdown_coplace"] / j["slowdown_isolated"]
    j["placement_ok"] = j["ok_coplace"] & j["ok_isolated"]
    return j[cols].sort_values(["config_id", "placement"]).reset_index(drop=True)
