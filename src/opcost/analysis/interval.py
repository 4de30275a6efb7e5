"""A prediction's 90% interval (:func:`opcost.analysis.estimate.predict_workload`): what its estimated operators,
its overhead between operators and its timings leave uncertain.

* **The estimated operators**, as a whole: how far a model's summed estimate is off when none of its
  configurations was measured, from the run's `predict_only` models, never profiled, predicted and timed on this
  host (:mod:`opcost.analysis.calibration`), else from the cost model's held-out workloads (leave-model-out
  cross-validation, :meth:`opcost.analysis.costmodel.CostModel.fit`); the 90% predictive range of that log error
  (:func:`opcost.analysis.heldout.model_spread`: their root mean square, Student's t with as many degrees of
  freedom as models) spans the estimated part's time, ``E x [e^-h, e^h]``. Where neither holds two models (a small
  database), the
  estimates' own intervals instead (each the 5-95% range of the held-out errors of the rule that estimated it:
  :meth:`~opcost.analysis.costmodel.CostModel.interval_of`), their ends added up within an op type and phase (one
  law errs the same way on all its configurations) and combined in quadrature across them. Composed from the
  operators' ranges, the interval of a model spans the range of a single estimate: on 30 models never profiled the
  composition's width, however its ranges were correlated, told nothing of which models erred most, and was twice
  as wide at the same coverage as the model-level range (docs/methodology.md, "An interval a model's error holds").
* **The method's own error**, in quadrature: the 5-95% range of how far the database's fully measured workloads'
  predictions (isolated costs + their modelled overhead) are off each end-to-end time their run took of them
  (:func:`~opcost.analysis.overhead_sources.method_error`: the machine's drift between minutes included), which holds
  the overhead's spread between workloads; on the measured part's time alone where the estimated part's range comes
  from `predict_only` models, whose errors against their end-to-end times already hold it (counted twice, it
  widened every model never profiled). With fewer than three such workloads (a study whose coverage loop profiled
  some op types only), an overhead taken from other workloads (the database's median per call, or its
  model's traces at other batch sizes) adds their 10-90% range per call over the workload's calls, and one from the
  workload's own trace (a profiled workload's, or a short trace taken at predict time) adds no other workload's
  range: that range, up to 80 µs a call on a default study, spanned several times a small model's whole overhead.
* **A database with no end-to-end time** (its ``e2e`` table missing or empty on these conditions: neither the
  method's error nor a timing spread can be taken from it): the method's error is taken as :data:`UNTIMED` either
  way, at least the worst |error| the accuracy table gives for measured models against opcost's reference, and the
  interval says so; never an interval of zero width for want of a timing.
* **Never narrower than the timings it rests on**: the spread of the end-to-end times of its model's measured
  workloads of its kind (every model's where its own has none: :func:`~opcost.analysis.overhead_sources.
  timing_spread`).

Measured operators count as exact (their own noise is small next to an estimate's). :attr:`widest` names the op type
whose estimates' own ranges are widest in seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from opcost.analysis.calibration import ModelSpread
from opcost.analysis.overhead_sources import every_time, method_error, timing_spread


@dataclass(frozen=True)
class Interval:
    """A prediction's centre and 90% interval in seconds, and the op type whose estimates widen it most."""

    centre: float
    low: float
    high: float
    widest: str | None
    basis: str  # what the estimated part's range rests on, in words
    untimed: str = ""  # where the database times nothing end to end: what the method's error was taken as, in words


UNTIMED = 0.35  # the method's relative error where the database times nothing end to end (README's accuracy table:
# measured models' worst |error| against opcost's reference, 31.5%; tests/test_readme.py keeps it at least that)
OWN_OVERHEAD = ("own trace", "trace now")  # overheads from the workload's own trace (OVERHEAD_FROM's keys)


@dataclass(frozen=True)
class Overhead:
    """A prediction's overhead between operators: ``seconds`` per iteration, where from (a key of
    :data:`~opcost.analysis.overhead_sources.OVERHEAD_FROM`) and the database's (median, 10th, 90th percentile)
    overhead per call (:func:`~opcost.analysis.overhead_sources.overhead_per_call`)."""

    seconds: float
    source: str
    per_call: tuple


def workload_interval(db: dict, used: pd.DataFrame, rows: pd.DataFrame, overhead: Overhead, statistic: str,
                      mode: str, model: str, model_error: ModelSpread | None) -> Interval:
    """The interval of a prediction whose operator rows are ``rows`` (``count``, ``cost_s``, ``total_s``,
    ``method``, each estimate's ``low_s``/``high_s``) and whose overhead between operators is ``overhead``;
    ``model_error``: the predictive spread of a model's log error (None: the estimates' own ranges composed).
    The module docstring says how."""
    n = rows["count"].astype(float)
    key = [rows["op_type"], rows["phase"]]
    down = (n * (rows["cost_s"] - rows["low_s"])).groupby(key).sum()
    up = (n * (rows["high_s"] - rows["cost_s"])).groupby(key).sum()
    spread = down ** 2 + up ** 2
    widest = str(spread.idxmax()[0]) if len(spread) and spread.max() > 0 else None
    centre = float(rows["total_s"].sum()) + overhead.seconds
    estimated = float(rows.loc[rows["method"] != "measured", "total_s"].sum())
    if model_error is not None:
        h = model_error.half
        ops_down, ops_up = estimated * (1 - np.exp(-h)), estimated * np.expm1(h)
        basis = f"the estimated part within x{np.exp(h):.2f} either way, as {model_error.basis}"
    else:
        ops_down, ops_up = float(np.sqrt((down ** 2).sum())), float(np.sqrt((up ** 2).sum()))
        basis = "each estimate's own held-out range (too few models held out for a model's)"
    calls = float(rows.loc[rows["phase"] == "forward", "count"].sum())  # the workload's calls, each once
    times = every_time(db, used, statistic)
    per_call = overhead.per_call
    off = method_error(db, used, mode, statistic, per_call[0], times)
    if off is not None:
        # errors of whole predictions (`predict_only` models) hold the method's error of their estimated part
        rest = centre - estimated if model_error is not None and model_error.whole else centre
        below, above = rest * max(0.0, -off[0]), rest * max(0.0, off[1])
    elif overhead.source in OWN_OVERHEAD:  # its own glue, traced: no other workload's range applies
        below = above = 0.0
    else:
        below, above = (per_call[0] - per_call[1]) * calls, (per_call[2] - per_call[0]) * calls
    floor, untimed = timing_spread(times, model, mode), ""
    if off is None and floor is None and not times:  # nothing timed end to end: the method's error is not known here
        below = above = centre * UNTIMED
        untimed = (f"no end-to-end time in the database: the method's error taken as ±{UNTIMED:.0%}, the accuracy "
                   "table's worst for measured models")
    low, high = centre - float(np.hypot(ops_down, below)), centre + float(np.hypot(ops_up, above))
    if floor is not None:
        low, high = min(low, centre * (1 + floor[0])), max(high, centre * (1 + floor[1]))
    return Interval(centre, low, high, widest, basis, untimed)
