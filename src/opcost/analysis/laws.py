"""The roofline laws of the cost model (:mod:`opcost.analysis.costmodel`): ``floor + max(FLOPs / compute rate,
bytes / memory rate)`` per op type and phase (and shared by a family or a phase), fitted to measured costs, each
rate bounded by what this host's measurements show (:func:`peak_rates`, :func:`typical_rates`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

RATE_SPAN = 4.0  # a call measures a law's rate when it takes at least this many times the law's cheapest call


@dataclass
class Law:
    """``floor_s + max(flops / compute_rate, bytes / memory_rate)``; rates in units per second."""

    floor_s: float
    compute_rate: float
    memory_rate: float
    configs: int
    worked: int = 0  # of them, those that do work (FLOPs or bytes): without any, the rates are not measured
    compute_known: bool = True  # whether a configuration measured the compute rate (fit_law)
    memory_known: bool = True  # whether a configuration measured the memory rate

    def answers(self, flops, nbytes) -> bool:
        """Whether the law can estimate a call of this work: a law fitted to calls without work (views) knows their
        cost per call, not the rate at which a call that moves data moves it."""
        return self.worked > 0 or (flops < 1 and nbytes < 1)

    def __call__(self, flops, nbytes):  # work below 1 FLOP or byte counts as 1, as in the fit (a view: no work)
        return self.floor_s + np.maximum(np.maximum(np.asarray(flops, float), 1.0) / self.compute_rate,
                                         np.maximum(np.asarray(nbytes, float), 1.0) / self.memory_rate)


def fit_law(flops, nbytes, seconds, peak: float | None = None, typical: tuple | None = None) -> Law:
    """The roofline law of :class:`Law` fitted to measured ``seconds`` (log-space least squares, soft-L1).

    Its compute rate is at most ``peak`` FLOP/s (:func:`peak_rates`: the fastest any measured configuration of the
    phase ran). A rate is measured only by a call whose time is mostly its FLOPs (bytes) at that rate and at least
    :data:`RATE_SPAN` times the cheapest call's, past what per-call costs hide, and whose time the rate does not
    overshoot (at most twice it: a slow rate that explains small calls' per-call differences answers a large call
    many times its time, and that call measures no rate). Calls all bound by the floor, by the
    other rate, or all of one size leave it free: a fit puts it anywhere (a compute rate the host never reached; a
    slow memory rate that explains differences between calls, not bandwidth) and answers for a large call at it.
    An unmeasured rate is therefore at least the phase's ``typical`` one, (compute, memory) per second: the median
    of the laws whose rate is measured (:func:`typical_rates`)."""
    from scipy.optimize import least_squares

    f, b, t = (np.asarray(v, float) for v in (flops, nbytes, seconds))
    worked = int(((f >= 1) | (b >= 1)).sum())
    f, b = np.maximum(f, 1.0), np.maximum(b, 1.0)
    logt = np.log(t)

    def model(theta):
        floor, crate, mrate = np.exp(theta)
        return floor + np.maximum(f / crate, b / mrate)

    # the floor is a per-call cost: at most the cheapest call measured (else a fit over large calls only would put
    # their size-dependent time into the floor and overstate every smaller call)
    floor_max = max(float(t.min()), 2e-10)
    top = max(float(peak), 2e3) if peak else 1e17

    def solve(clow: float, mlow: float):
        x0 = np.log([floor_max / 2, np.clip(np.median(f / t), clow * 1.001, top / 1.001),
                     np.clip(np.median(b / t), mlow * 1.001, 5e14)])
        res = least_squares(lambda th: np.log(model(th)) - logt, x0, loss="soft_l1", f_scale=0.2,
                            bounds=(np.log([1e-10, clow, mlow]), np.log([floor_max, top, 1e15])))
        return np.exp(res.x)

    floor, crate, mrate = solve(1e3, 1e3)
    known = (measures(f, t, crate), measures(b, t, mrate))
    clow, mlow = typical or (None, None)
    clow = min(clow, top / 1.01) if clow and not known[0] and clow > crate else 1e3
    mlow = min(mlow, 1e14) if mlow and not known[1] and mlow > mrate else 1e3
    if clow > 1e3 or mlow > 1e3:
        floor, crate, mrate = solve(clow, mlow)
    return Law(float(floor), float(crate), float(mrate), len(t), worked, *known)


def measures(work, seconds, rate: float) -> bool:
    """Whether some call, of ``work`` (FLOPs or bytes) in ``seconds``, measured ``rate``: the rate explains at least
    half of its time and does not overshoot it (at most twice it), and the call took at least :data:`RATE_SPAN`
    times the cheapest one (past what per-call costs hide)."""
    work, t = np.asarray(work, float), np.asarray(seconds, float)
    at_rate = work / rate
    return bool(np.any((at_rate >= 0.5 * t) & (at_rate <= 2.0 * t) & (t >= RATE_SPAN * t.min())))


def typical_rates(laws: dict) -> dict:
    """(mode, phase) -> (compute, memory): the median compute and memory rates of ``laws`` (keyed (op_type, mode,
    phase), with work) whose rate is measured (:attr:`Law.compute_known`, :attr:`Law.memory_known`; None where
    none is): what an operator of the phase typically reaches on this host, the lower bound of every unmeasured
    rate (:func:`fit_law`)."""
    rates: dict = {}
    for (_, mode, phase), law in laws.items():
        if law.worked:
            c, m = rates.setdefault((mode, phase), ([], []))
            c.extend([law.compute_rate] if law.compute_known else [])
            m.extend([law.memory_rate] if law.memory_known else [])
    return {k: tuple(float(np.median(v)) if v else None for v in cm) for k, cm in rates.items()}


def peak_rates(data: pd.DataFrame, y: pd.Series) -> dict:
    """(mode, phase) -> the fastest FLOP rate any configuration of ``data`` (``y``: its seconds) ran at: what this
    host and thread count reach, the ceiling of every law's compute rate (:func:`fit_law`)."""
    work = data["flops"].astype(float)
    rate = (work / y.astype(float)).where(work >= 1)
    return {k: float(v) for k, v in rate.groupby([data["mode"], data["phase"]]).max().items() if np.isfinite(v)}
