"""The glue between a model's operators, timed without the profiler.

A model's iteration costs its operators plus the Python code between and around them (container modules, the
parent's ``forward``, a Hugging Face model's mask and cache bookkeeping), and that code also costs the operators
something: the caches it leaves cold. A decode step of a small Llama-shaped decoder ran each Linear in 65 µs inside
the model where an immediate second call on the same input took 18 µs and the replay of the same calls in model
order 31 µs (benchmarks/records/measurements.md). A trace sees neither part well at this scale: the profiler's own
bookkeeping between two calls is several microseconds and touches memory too, so the replay it records runs about as
cold as the model, and the difference of the two traces misses what the glue does to the operators.

:func:`time_glue` times the model's step against its operators as isolated profiling times them: one rotation round
of the workload's configurations per iteration (:func:`opcost.measure.operator_round.operator_round`: model order, each
call timed alone, inputs as their producers leave them, outputs held as long as the model holds them, the model's
reference iteration between rounds as often as profiling runs it), the sum of the round's per-call medians. The glue
is then exactly what the isolated costs leave out: in decode steps a plain replay of the same calls, back to back
with each output dropped at once, ran them 7-11% faster than the rotation times them, and rounds without the
reference iterations 3-4% faster; a glue taken against either counted that part twice
(benchmarks/records/measurements.md).
The two sides alternate, in blocks of the same seconds, each block after one untimed iteration of its own (the
state a run of the model finds), the order alternating between rounds so that a drift of the machine's speed
cancels. The glue of one iteration is the median over rounds of model minus operators.
:class:`opcost.analysis.overhead.OverheadModel` adds it where the trace's own model of the gaps falls short of it by
more than its noise.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

ROUNDS = 15  # alternating (model, replay) block pairs
MIN_BLOCK_S = 0.05  # each block at least this long: many µs-scale steps, or one long iteration
MAX_S = 10.0  # the whole timing at most about this long (fewer rounds for slow iterations, never under 3)


@dataclass(frozen=True)
class GlueTiming:
    """Per iteration: ``glue_s`` the median over ``rounds`` of model minus operators, ``std_s`` the standard
    deviation of those differences, ``model_s`` and ``operators_s`` the medians of each."""

    glue_s: float
    std_s: float
    rounds: int
    model_s: float
    operators_s: float

    @property
    def se_s(self) -> float:
        """The standard error of ``glue_s`` (a median's: 1.2533 σ / √rounds)."""
        return standard_error(self.std_s, self.rounds)


def standard_error(std_s: float, rounds: int) -> float:
    """The standard error of the median of ``rounds`` differences of standard deviation ``std_s``."""
    return 1.2533 * std_s / math.sqrt(max(1, rounds))


def _block(fn: Callable[[], object], sync: Callable[[], None], n: int) -> float:
    fn()  # untimed: the block starts after an iteration of its own, as a run of the model does
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n


def _operator_block(operators: Callable[[], list[float]], n: int) -> float:
    """Seconds of one iteration's operators over ``n`` rounds (after an untimed one): the sum over calls of each
    call's median, as isolated costs add up."""
    operators()
    per_call = [operators() for _ in range(n)]
    return float(sum(statistics.median(ts) for ts in zip(*per_call)))


def time_glue(step: Callable[[], object], operators: Callable[[], list[float]],
              sync: Callable[[], None] = lambda: None, rounds: int = ROUNDS, min_block_s: float = MIN_BLOCK_S,
              max_s: float = MAX_S) -> GlueTiming:
    """The model's ``step`` (zero-argument; ``sync`` waits for a device) against its ``operators`` (one round of
    them per call, returning each call's seconds, as :func:`opcost.measure.operator_round.operator_round` builds it),
    timed as the module docstring says."""
    once = max(_block(step, sync, 1), 1e-9)
    n = max(1, math.ceil(min_block_s / once))
    per_round = 3 * (n + 1) * once  # both blocks, each with its untimed iteration (a round costs about a step)
    rounds = max(3, min(rounds, int(max_s / per_round)))
    model, ops = [], []
    sides = ((model, lambda: _block(step, sync, n)), (ops, lambda: _operator_block(operators, n)))
    for k in range(rounds):
        for out, timed in sides if k % 2 == 0 else sides[::-1]:
            out.append(timed())
    diffs = [m - r for m, r in zip(model, ops)]
    return GlueTiming(statistics.median(diffs), statistics.stdev(diffs), len(diffs), statistics.median(model),
                      statistics.median(ops))
