"""The timing core shared by operator and end-to-end measurements.

A measurement times ``calls_per_sample`` back-to-back calls per sample (sized so a sample lasts at least
``min_sample_s``, which keeps timer resolution and per-sample overhead negligible), after a warm-up of at least
``warmup_s`` and ``warmup_calls``. Samples are taken in blocks; after each block the 95% confidence interval of the
median (order statistics, distribution-free) is computed and sampling stops once its half-width is within
``target_rel_ci`` of the median and at least ``min_samples`` were taken, or when ``max_seconds`` is spent.

On CUDA the block of calls is timed between CUDA events; on CPU with ``time.perf_counter`` (:class:`Clock`, the one
clock of every timing path).

:func:`opcost.measure.rotation.measure_rotation` times several callables in rotation instead: every round calls
each once, in a given order (a model's call order) or one shuffled per round, and times each call alone. A call
then finds caches, branch predictors and the thread pool in the state other operators left them, as inside a model,
instead of the state its own previous call left them (a back-to-back loop keeps the operator's weights, code and
data hot, and under-states what it costs in a model).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)

ROTATION_STATES = ("fresh", "rotation")  # `cache` states measured by measure_rotation (see opcost.measure.profile)
FUTILITY_ROUNDS = 50  # a rotation judges which medians cannot reach their target only after this many rounds


@dataclass(frozen=True)
class TimingSettings:
    target_rel_ci: float = 0.02
    min_samples: int = 10
    max_samples: int = 1000
    max_seconds: float = 1.0
    warmup_s: float = 0.05
    warmup_calls: int = 2
    min_sample_s: float = 0.001
    block: int = 10
    noisy_iqr: float = 0.10
    abs_ci_s: float = 2e-7

    @classmethod
    def from_config(cls, cfg: dict | None) -> "TimingSettings":
        from opcost.config import section

        return section(cls, cfg)

    def in_turn(self) -> "TimingSettings":
        """These end-to-end settings for one of several timings taken in turn, round after round (a workload and a
        reference, so that the host's drift cancels in their ratio): each capped at half a second and a tenth of a
        second's warm-up, at least 5 samples, a 1% target."""
        return TimingSettings(target_rel_ci=0.01, max_seconds=min(0.5, self.max_seconds),
                              warmup_s=min(0.1, self.warmup_s), min_samples=5, min_sample_s=self.min_sample_s)


def median_ci(sorted_samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median: order statistics around n/2 (normal approximation to the binomial)."""
    n = len(sorted_samples)
    if n == 0:
        return math.nan, math.nan
    z = {0.95: 1.959963984540054, 0.99: 2.5758293035489}[level]
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1 if n > 1 else 0)
    return float(sorted_samples[lo]), float(sorted_samples[max(lo, hi)])


def within_sigma(samples: np.ndarray, k: float = 3.0) -> np.ndarray:
    """The samples within k standard deviations of their mean (all of them when the deviation is 0)."""
    mu, sd = float(np.mean(samples)), float(np.std(samples))
    return samples[np.abs(samples - mu) <= k * sd] if sd > 0 else samples


def trimmed_mean(samples: np.ndarray, k: float = 3.0) -> float:
    """Mean of the samples within k standard deviations of the mean (the seeds' 3-sigma trimmed mean)."""
    if len(samples) == 0:
        return math.nan
    kept = within_sigma(samples, k)
    return float(np.mean(kept)) if len(kept) else float(np.mean(samples))


@dataclass
class Measurement:
    """Samples (seconds per call) and the statistics derived from them, in one place."""

    samples: np.ndarray
    calls_per_sample: int
    wall_s: float
    settings: TimingSettings = field(default_factory=TimingSettings)
    rotation: bool = False  # samples are single calls taken in rotation (see measure_rotation)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self.samples)) if self.n else math.nan

    @property
    def trimmed_mean(self) -> float:
        return trimmed_mean(self.samples)

    @property
    def iqr(self) -> float:
        if not self.n:
            return math.nan
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float(q3 - q1)

    @property
    def ci(self) -> tuple[float, float]:
        return median_ci(np.sort(self.samples))

    @property
    def rel_ci(self) -> float:
        lo, hi = self.ci
        return (hi - lo) / 2 / self.median if self.n and self.median > 0 else math.inf

    @property
    def precise(self) -> bool:
        """The median's 95% CI is within the relative target, or narrower than the absolute floor ``abs_ci_s``
        (timer resolution and per-call overhead: a sub-microsecond operator cannot be known better)."""
        return self.attainable(1.0)

    def attainable(self, growth: float) -> bool:
        """Would the median be :attr:`precise` with ``growth`` times as many samples? The CI's half-width is taken
        to shrink as 1/sqrt(n), as order statistics do where the samples' density at the median is positive (a
        bimodal distribution split at its median narrows slower still: it is not held longer for that)."""
        if not self.n:
            return False
        lo, hi = self.ci
        shrink = math.sqrt(max(growth, 1.0))
        return (self.rel_ci / shrink <= self.settings.target_rel_ci
                or (hi - lo) / 2 / shrink <= self.settings.abs_ci_s)

    def agrees(self, other: "Measurement") -> bool:
        """Two measurements of one thing (e.g. visits seconds apart) agree: their medians differ by at most twice
        the precision target relative to their mean (each within its target of the truth), the sum of their CI
        half-widths (a short visit's median is less certain), or twice the absolute floor ``abs_ci_s``. A machine
        that ran slow for the whole of one visit gives a tight but wrong median that only another visit shows."""
        d = abs(self.median - other.median)
        s = self.settings
        half = sum((hi - lo) / 2 for lo, hi in (self.ci, other.ci))
        return bool(d <= max(s.target_rel_ci * (self.median + other.median), half) or d <= 2 * s.abs_ci_s)

    def pooled(self, other: "Measurement") -> "Measurement":
        """One measurement of both visits' samples (taken with the same ``calls_per_sample``)."""
        if other.calls_per_sample != self.calls_per_sample:
            raise ValueError(f"samples of {self.calls_per_sample} and {other.calls_per_sample} calls do not pool")
        return Measurement(np.concatenate([self.samples, other.samples]), self.calls_per_sample,
                           self.wall_s + other.wall_s, self.settings, self.rotation)

    @property
    def noisy(self) -> bool:
        """Blocked samples (averages of many calls): IQR/median above ``noisy_iqr`` (the machine disturbed the
        measurement). Single-call samples (rotation) vary by nature: noisy when the median missed its precision
        target."""
        if not self.n or not self.median > 0:
            return False
        if self.rotation:
            return not self.precise
        return self.iqr / self.median > self.settings.noisy_iqr

    def stats(self) -> dict:
        lo, hi = self.ci
        return {"median_s": self.median, "trimmed_mean_s": self.trimmed_mean, "iqr_s": self.iqr,
                "ci_low_s": lo, "ci_high_s": hi, "n": self.n, "calls_per_sample": self.calls_per_sample,
                "noisy": self.noisy}


class Clock:
    """The one clock of every timing path (back-to-back blocks, rotations, in-situ hooks, co-placement rounds).

    :meth:`mark` takes a timestamp where it is called and :meth:`seconds` turns two marks into the seconds between
    them, later: on a CPU marks are ``time.perf_counter()`` readings; on CUDA they are events recorded on the current
    stream, so marking never synchronises the device inside the timed code, and a span reads the device's timeline
    (an operator's launch path while the device keeps up, its kernels while it lags behind). :meth:`seconds` waits
    for its end mark. Use :func:`clock_for`."""

    # On a CPU a mark is perf_counter itself: hooks that bind ``mark = clock.mark`` once call the builtin with no
    # Python frame of its own inside their spans (a method here added ~0.1 us to every span).
    mark = staticmethod(time.perf_counter)

    def seconds(self, start, end) -> float:
        return end - start

    # The timed calls read perf_counter inline: even the bound lookup of ``self.mark`` would add ~45 ns to every
    # microsecond-scale operator the rotation times one call at a time.
    def time_block(self, fn: Callable[[], object], calls: int) -> float:
        """Seconds of ``calls`` back-to-back calls of ``fn``."""
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0

    def time_call(self, fn: Callable[[], object]) -> tuple[float, object]:
        """(seconds, output) of one call of ``fn``."""
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out

    def time_free(self, dead: list) -> float:
        """Seconds to drop the references in ``dead`` (the last ones: the frees)."""
        return self.time_call(dead.clear)[0]


class _CudaClock(Clock):
    def __init__(self):
        import torch

        self.torch = torch
        # Events whose spans were read, by identity, recorded again by later marks. A mark may end one span and
        # start the next (the backward spans tile the pass), so it is read twice; kept once here, it is never
        # handed to two later marks, which would record one event for both and read spans of 0 or less.
        self._free: dict[int, object] = {}

    def mark(self):
        ev = self._free.popitem()[1] if self._free else self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def time_block(self, fn: Callable[[], object], calls: int) -> float:
        start = self.mark()
        for _ in range(calls):
            fn()
        return self.seconds(start, self.mark())

    def time_call(self, fn: Callable[[], object]) -> tuple[float, object]:
        start = self.mark()
        out = fn()
        return self.seconds(start, self.mark()), out

    def seconds(self, start, end) -> float:
        end.synchronize()
        out = start.elapsed_time(end) / 1e3
        self._free[id(start)] = start
        self._free[id(end)] = end
        return out


def clock_for(device: str) -> Clock:
    """The clock of ``device`` (``cpu``, ``cuda``, ``cuda:N``)."""
    return _CudaClock() if str(device).startswith("cuda") else Clock()


def measure(fn: Callable[[], object], settings: TimingSettings = TimingSettings(), device: str = "cpu",
            clock=None, prior: Measurement | None = None, calls: int | None = None) -> Measurement:
    """Time ``fn`` adaptively (see module docstring). ``clock`` overrides the device clock (tests). ``prior``: an
    earlier visit's measurement of the same thing; this visit takes samples of as many calls as it did and stops,
    after ``min_samples``, once the samples of both are precise (:meth:`Measurement.pooled`): a second visit
    completes the first instead of repeating it. Returns this visit's samples only. ``calls``: samples of this many
    calls (default: the prior's, else enough calls to last ``min_sample_s``, from the warm-up)."""
    if clock is None:
        clock = clock_for(device)
    t_start = time.perf_counter()
    # warm-up: at least warmup_calls calls and warmup_s seconds; also estimates the cost of one call
    warm, spent = 0, 0.0
    while warm < settings.warmup_calls or spent < settings.warmup_s:
        spent += clock.time_block(fn, 1)
        warm += 1
        if time.perf_counter() - t_start > settings.max_seconds / 2:
            break
    per_call = max(spent / max(warm, 1), 1e-9)
    cps = calls or (prior.calls_per_sample if prior is not None else
                    max(1, math.ceil(settings.min_sample_s / per_call)))
    samples: list[float] = []
    while True:
        for _ in range(settings.block):
            samples.append(clock.time_block(fn, cps) / cps)
        m = Measurement(np.asarray(samples), cps, time.perf_counter() - t_start, settings)
        if m.n >= settings.min_samples and (m if prior is None else prior.pooled(m)).precise:
            break
        if m.n >= settings.max_samples or time.perf_counter() - t_start >= settings.max_seconds:
            break
    m.wall_s = time.perf_counter() - t_start
    return m


class RotationError(RuntimeError):
    """A callable of a rotation raised: ``index`` says which (the others can be measured without it)."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(f"callable {index}: {type(error).__name__}: {error}")
        self.index, self.error = index, error
