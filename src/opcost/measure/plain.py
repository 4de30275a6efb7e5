"""A workload timed as a plain PyTorch process runs it, in turn with opcost's own process.

opcost's measuring processes keep glibc from returning freed memory to the OS (:mod:`opcost.measure.memory`) and
may pin their threads (``affinity: pin``): the conditions under which operator costs and their end-to-end checks
hold. A user who times the model with a script of their own runs it in a plain process: glibc's default allocator
(fresh pages, and page faults, for large activations), threads unpinned. The dedicated end-to-end job therefore
also runs the workload in a child process started with none of opcost's settings but the thread count (`e2e`
method `plain`), and the two processes time blocks of iterations alternately, round after round, in the same
seconds: each round's ratio (the plain block's median over opcost's) has the host's drift cancelled, and their median
is the row's ``vs_opcost``: how much longer the user's own script takes than the process the costs were measured in.
What makes the difference at large batches is counted too: the minor page faults per iteration the plain process
takes beyond opcost's (``faults``: fresh pages of large activations that glibc maps and returns at every iteration)
and what one costs on this host (``fault_s``, :func:`opcost.measure.memory.fault_cost_s`); their product
(:func:`fault_extra_s`) is reported beside the gap as its likely cause, not added to predictions (methodology says
why).

The child is ``python -m opcost.measure.plain REQUEST.json``: the request holds the model's name and config entry,
batch, mode, device, dtype, threads and warm-up settings. It builds and warms the workload, counts its page faults
over a few more iterations, prints ``OPCOST {"faults": per iteration}`` and then answers each request line on its
standard input (``{"calls": C, "samples": S}``: S samples of C back-to-back iterations each) with one line
``OPCOST [seconds per iteration, ...]``; other output of the model's own code is passed over.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

METHOD = "plain"
CONDITIONS = "glibc's default allocator, threads not pinned"  # what differs from opcost's measuring processes
PROCESS = "glibc keeping freed memory, {threads} thread(s)"  # the measuring processes the costs hold in
TAG = "OPCOST "  # the child's answers start with this; anything else it prints is the model's own
BLOCK = 5  # samples per block at most, each process's turn in a round
MIN_ROUNDS = 6


class PlainProcess:
    """The workload built in a plain child process, timing blocks of iterations on request; a context manager (the
    child is stopped on exit)."""

    def __init__(self, name: str, spec: dict, batch: int, mode: str, config, settings):
        request = {"name": name, "spec": spec, "batch": int(batch), "mode": mode, "device": config["device"],
                   "dtype": config["dtype"], "threads": int(config["threads"]), "timing": asdict(settings)}
        self._tmp = tempfile.TemporaryDirectory(prefix="opcost-plain-")
        req = Path(self._tmp.name) / "request.json"
        req.write_text(json.dumps(request))
        self._err = open(Path(self._tmp.name) / "stderr.txt", "w+")  # a file: a full pipe would stall the child
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "OMP_", "GOMP_", "KMP_"))}
        self._proc = subprocess.Popen([sys.executable, "-m", "opcost.measure.plain", str(req)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._err, text=True, env=env, cwd=os.getcwd())
        self.faults = float(json.loads(self._answer())["faults"])  # built and warmed: its page faults per iteration

    def _answer(self) -> str:
        while line := self._proc.stdout.readline():
            if line.startswith(TAG):
                return line[len(TAG):]
        self._proc.wait()
        self._err.seek(0)
        tail = ([ln for ln in self._err.read().strip().splitlines() if ln.strip()] or ["no output"])[-1]
        raise RuntimeError(f"the plain process failed: {tail}")

    def block(self, calls: int, samples: int) -> list[float]:
        """``samples`` samples of ``calls`` back-to-back iterations each, seconds per iteration."""
        self._proc.stdin.write(json.dumps({"calls": int(calls), "samples": int(samples)}) + "\n")
        self._proc.stdin.flush()
        return json.loads(self._answer())

    def __enter__(self) -> "PlainProcess":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._proc.poll() is None:
                self._proc.stdin.close()  # end of requests: the child exits
                self._proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        finally:
            self._err.close()
            self._tmp.cleanup()


@dataclass
class InTurn:
    """Blocks of the two processes timed alternately: ``plain`` (its samples, a Measurement), ``ratios`` (per round,
    the plain block's median over opcost's)."""
    plain: object
    ratios: np.ndarray

    @property
    def vs_opcost(self) -> float:
        return float(np.median(self.ratios))


def in_turn(step, plain: PlainProcess, settings, device: str, calls: int) -> InTurn:
    """Blocks of ``calls``-iteration samples of ``step`` here and of the same workload in ``plain``, alternately
    (who goes first alternates too), until the median ratio is known to ``settings.target_rel_ci`` after at least
    :data:`MIN_ROUNDS` rounds, or both processes together have run for ``settings.max_seconds``."""
    from opcost.measure.timing import Measurement, clock_for, median_ci

    clock = clock_for(device)
    t0 = time.perf_counter()
    # samples per block: a tenth of a second's worth, 1 to BLOCK (a slow iteration is not run 60 times)
    block = max(1, min(BLOCK, round(0.1 / max(clock.time_block(step, calls), 1e-9))))
    theirs, ratios = [], []
    while True:
        mine = []
        for who in (("mine", "theirs") if len(ratios) % 2 == 0 else ("theirs", "mine")):
            if who == "mine":
                mine = [clock.time_block(step, calls) / calls for _ in range(block)]
            else:
                got = plain.block(calls, block)
        theirs += got
        ratios.append(float(np.median(got) / np.median(mine)))
        r = np.sort(ratios)
        lo, hi = median_ci(r)
        if len(r) >= MIN_ROUNDS and ((hi - lo) / 2 / np.median(r) <= settings.target_rel_ci
                                     or time.perf_counter() - t0 >= settings.max_seconds):
            break
    m = Measurement(np.asarray(theirs), calls, time.perf_counter() - t0, settings)
    return InTurn(m, np.asarray(ratios))


def time_plain(name: str, spec: dict, batch: int, mode: str, config, settings, step,
               calls: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`e2e` row, `samples`) of the workload timed in a plain child process, on ``config``'s device, dtype and
    threads, with ``settings`` (a :class:`~opcost.measure.timing.TimingSettings`), in turn with ``step`` (opcost's
    own iteration of it; samples of ``calls`` iterations in both processes): the row's ``vs_opcost`` is the median
    ratio of the rounds (:func:`in_turn`)."""
    from opcost import tables
    from opcost.measure.e2e import e2e_frames
    from opcost.measure.memory import fault_cost_s, faults_per_call

    with PlainProcess(name, spec, batch, mode, config, settings) as plain:
        turns = in_turn(step, plain, settings, config["device"], calls)
        faults = max(0.0, plain.faults - faults_per_call(step))
    row, samples = e2e_frames((name, batch, mode), turns.plain, METHOD, config["device"])
    row = tables.frame(tables.E2E, [dict(row.iloc[0], vs_opcost=turns.vs_opcost, faults=faults,
                                         fault_s=fault_cost_s(int(config["threads"])))])
    return row, samples.assign(source="plain")


def fault_extra_s(row) -> float:
    """Seconds per iteration a plain process pays for its page faults beyond opcost's (``faults`` x ``fault_s`` of a
    `plain` row); NaN for a row without them (a database of an earlier version)."""
    faults, cost = row.get("faults"), row.get("fault_s")
    if faults is None or cost is None or pd.isna(faults) or pd.isna(cost):
        return float("nan")
    return float(faults * cost)


def plain_gaps(e2e: pd.DataFrame, in_turn: bool = False) -> dict[str, float]:
    """Per workload (``model/mode/bN``): how much longer a plain process takes than opcost's, its newest `plain`
    row's ``vs_opcost`` minus 1 (blocks timed in turn); for a row without it (a database of an earlier version),
    its median over the newest `dedicated` one's, minus 1 (timed one after the other), unless ``in_turn``."""
    out = {}
    for (model, mode, batch), g in e2e.groupby(["model", "mode", "batch"], sort=False):
        newest = {m: r.sort_values("timestamp").iloc[-1] for m, r in g.groupby("method")}
        if METHOD not in newest:
            continue
        vs = newest[METHOD].get("vs_opcost")
        if vs is not None and not pd.isna(vs):
            out[f"{model}/{mode}/b{int(batch)}"] = float(vs - 1)
        elif not in_turn and "dedicated" in newest and newest["dedicated"]["median_s"] > 0:
            out[f"{model}/{mode}/b{int(batch)}"] = float(newest[METHOD]["median_s"] / newest["dedicated"]["median_s"]
                                                          - 1)
    return out


def _newest_plain(e2e: pd.DataFrame) -> dict[str, pd.Series]:
    """Per workload (``model/mode/bN``): its newest `plain` row."""
    plain = e2e[e2e["method"] == METHOD].sort_values("timestamp")
    return {f"{model}/{mode}/b{int(batch)}": g.iloc[-1]
            for (model, mode, batch), g in plain.groupby(["model", "mode", "batch"], sort=False)}


def fault_extras(e2e: pd.DataFrame) -> dict[str, float]:
    """Per workload (``model/mode/bN``): its newest `plain` row's :func:`fault_extra_s`, where it has one."""
    extras = {key: fault_extra_s(row) for key, row in _newest_plain(e2e).items()}
    return {key: extra for key, extra in extras.items() if np.isfinite(extra)}


def workload_gap(e2e: pd.DataFrame, model: str, batch: int, mode: str) -> tuple[float | None, str | None]:
    """(gap, what it is) of a workload: how much longer a plain process took than opcost's own (:func:`plain_gaps`),
    the workload's own (with its page faults named where the plain process counted any), else the median over the
    workloads that have one; (None, None) without any."""
    gaps, in_turn = plain_gaps(e2e), plain_gaps(e2e, in_turn=True)
    how = "timed in turn" if len(in_turn) == len(gaps) else "timed one after the other"
    own = gaps.get(key := f"{model}/{mode}/b{int(batch)}")
    if own is None and gaps:
        return float(np.median(list(gaps.values()))), f"median of {len(gaps)} workloads, {how}"
    if own is None:
        return None, None
    said = f"this workload, {'timed in turn' if key in in_turn else 'timed one after the other'}"
    row = _newest_plain(e2e).get(key)
    extra = fault_extra_s(row) if row is not None else float("nan")
    if np.isfinite(extra) and row["faults"] >= 1:
        said += (f"; its {row['faults']:,.0f} page faults per iteration beyond opcost's process (glibc's default "
                 f"allocator) cost about {extra * 1e3:.3g} ms")
    return own, said


def against_plain(predictions: pd.DataFrame, e2e: pd.DataFrame) -> pd.DataFrame:
    """``predictions`` with ``error_plain``: each prediction against a plain process, ``(1 + error) / (1 + gap) - 1``
    with the workload's gap timed in turn (:func:`plain_gaps`), missing where it has none. The reference of
    ``error`` was timed in the minutes of the operators and the gap in the same seconds as the end-to-end job's own
    blocks, so the host's drift cancels in both; what it assumes is that the end-to-end job's process runs the model
    as the profiling job's does."""
    gaps = plain_gaps(e2e, in_turn=True)
    keys = [f"{m}/{mode}/b{int(b)}" for m, mode, b in zip(predictions["model"], predictions["mode"],
                                                           predictions["batch"])]
    gap = pd.Series([gaps.get(k, np.nan) for k in keys], index=predictions.index, dtype="Float64")
    return predictions.assign(error_plain=(1 + predictions["error"].astype("Float64")) / (1 + gap) - 1)


def _child(request_path: str) -> None:
    import torch

    from opcost.measure.memory import faults_per_call
    from opcost.measure.timing import clock_for
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    req = json.loads(Path(request_path).read_text())
    torch.set_num_threads(req["threads"])
    wl = make_workload(load_model(req["name"], req["spec"], req["device"], req["dtype"]), req["batch"], req["mode"])
    clock, timing = clock_for(req["device"]), req["timing"]
    warm, spent = 0, 0.0
    while warm < timing["warmup_calls"] or spent < timing["warmup_s"]:
        spent += clock.time_block(wl.step, 1)
        warm += 1
    print(TAG + json.dumps({"faults": faults_per_call(wl.step)}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        samples = [clock.time_block(wl.step, ask["calls"]) / ask["calls"] for _ in range(ask["samples"])]
        print(TAG + json.dumps(samples), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1])
