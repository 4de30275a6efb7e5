"""A workload's placement problem on two memory tiers and its solvers (:mod:`opcost.analysis.advise` builds the
problem from a database and reports the plans).

The predicted time is linear in each group's tier but for the calls that read both a parameter group and the
activations: ``T = T_fast + a·x_A + Σ_g c_g·x_g + Σ_g d_g·x_A·x_g`` (x = 1: on the slow tier). :func:`optimise`
solves it exactly as an integer program (``scipy.optimize.milp``, HiGHS), with ``y_g = x_A·x_g`` linearised by
its four McCormick inequalities (exact for binaries) and the groups of identical bytes and coefficients (a
configuration's repeated layers) merged into one integer count, which keeps the program small; :func:`greedy` moves
the group with the most bytes saved per second lost until the budget holds; :func:`first_touch` fills the fast
tier in call order. :func:`budget_bytes` reads a budget (a size or a share of the footprint).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from opcost.errors import OpcostError

ACTIVATIONS = "<activations>"
METHODS = ("optimiser", "greedy", "first_touch")
_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


@dataclass(frozen=True)
class AdviseSettings:
    """What to advise on: ``tiers`` (fast, slow; None: the database's fast tier and its only slower one), the
    ``statistic`` and measurement ``conditions`` (host, device, threads) of the prediction, the database directory
    (the cost model is cached beside it), whether to merge interchangeable groups, and the solver's limits."""

    tiers: tuple[str, str] | None = None
    prefer: tuple[str, ...] = ()  # without ``tiers``, where the database holds several slower tiers: the first held
    statistic: str | None = None
    conditions: dict = field(default_factory=dict)
    db_dir: object = None
    merge: bool = True
    time_limit_s: float = 60.0
    gap: float = 1e-6


@dataclass
class Group:
    """Tensors placed together: one parameter group, or the activations (:data:`ACTIVATIONS`)."""

    name: str
    tensors: tuple[str, ...]
    bytes: int
    first_use: int
    pinned: bool = False  # must stay on the fast tier


@dataclass
class Problem:
    """A workload's placement problem: its groups (``groups[0]``: the activations) and, per group, the extra
    seconds per iteration when it alone is on the slow tier (``lin``, rows centre/low/high) and when it and the
    activations are (``inter``, beyond both alone; 0 for the activations), with their estimated parts."""

    workload: dict
    fast: str
    slow: str
    groups: list[Group]
    fast_s: tuple[float, float, float]  # the all-fast prediction: centre, low, high
    ops_s: float  # its operator time
    ops_est_s: float  # of it, estimated
    lin: np.ndarray
    inter: np.ndarray
    lin_est: np.ndarray
    inter_est: np.ndarray
    notes: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> np.ndarray:
        return np.array([g.bytes for g in self.groups], dtype=float)

    @property
    def pinned(self) -> np.ndarray:
        return np.array([g.pinned for g in self.groups], dtype=bool)

    @property
    def must_stay_fast(self) -> int:
        return int(sum(g.bytes for g in self.groups if g.pinned))

    @property
    def footprint(self) -> int:
        return int(sum(g.bytes for g in self.groups))


@dataclass
class Plan:
    """One placement of a problem's groups (``slow``: on the slow tier) and what it is predicted to cost."""

    method: str
    budget_bytes: int
    slow: np.ndarray
    predicted_s: float
    low_s: float
    high_s: float
    slowdown: tuple[float, float, float]
    estimated_share: float
    fast_bytes: int
    slow_bytes: int
    solve_s: float = 0.0
    exact: bool = True  # False: the solver stopped at its time limit with the best placement found

    def as_dict(self, problem: Problem, with_plan: bool = True) -> dict:
        out = {"method": self.method, "budget_bytes": int(self.budget_bytes), "predicted_s": float(self.predicted_s),
               "low_s": float(self.low_s), "high_s": float(self.high_s),
               "predicted_slowdown": float(self.slowdown[0]), "low_slowdown": float(self.slowdown[1]),
               "high_slowdown": float(self.slowdown[2]), "estimated_share": float(self.estimated_share),
               "bytes": {problem.fast: int(self.fast_bytes), problem.slow: int(self.slow_bytes)},
               "solve_s": float(self.solve_s), "exact": bool(self.exact)}
        if with_plan:
            out["plan"] = {t: problem.slow if s else problem.fast for g, s in zip(problem.groups, self.slow)
                           for t in g.tensors}
        return out


def evaluate(problem: Problem, slow, method: str = "plan", budget: int | None = None, solve_s: float = 0.0) -> Plan:
    """The predicted iteration of a placement (``slow``: per group, on the slow tier)."""
    x = np.asarray(slow, dtype=bool)
    xf, xa = x.astype(float), float(x[0])
    extra = problem.lin @ xf + xa * (problem.inter @ xf)
    est = float(problem.lin_est @ xf + xa * (problem.inter_est @ xf))
    centre, low, high = problem.fast_s
    ops = problem.ops_s + extra[0]
    fast_bytes = int(problem.bytes[~x].sum())
    return Plan(method, problem.footprint if budget is None else int(budget), x, centre + extra[0], low + extra[1],
                high + extra[2], tuple(float((centre + e) / centre) if centre > 0 else 1.0 for e in extra),
                min(1.0, (problem.ops_est_s + est) / ops) if ops > 0 else 0.0, fast_bytes,
                problem.footprint - fast_bytes, solve_s)


def slow_mask(problem: Problem, plan: dict) -> np.ndarray:
    """A plan's tensor -> tier mapping (a plan file's `plan`) as the per-group mask :func:`evaluate` takes."""
    out = []
    for g in problem.groups:
        tiers = {plan.get(t) for t in g.tensors}
        if None in tiers or len(tiers) > 1:
            raise OpcostError(f"plan group {g.name}", f"its tensors are not all on one tier: {sorted(map(str, tiers))}")
        out.append(tiers.pop() == problem.slow)
    return np.array(out, dtype=bool)


# --- budgets ------------------------------------------------------------------------------------------------------

def parse_budget(spec) -> tuple[str, float]:
    """("share", 0..1) or ("size", bytes) of a budget (:func:`budget_bytes`); a malformed one is one line, said
    before anything is built."""
    text = str(spec).strip()
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):  # a config's number: a share
        share = float(spec)
    elif text.endswith("%"):
        try:
            share = float(text[:-1]) / 100
        except ValueError:
            raise OpcostError(f"--budget {text}", "expected a share such as 25%") from None
    else:
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)", text)
        if not m or m.group(2).lower() not in _UNITS:
            raise OpcostError(f"--budget {text}", "expected a size (2GiB, 512MB, bytes) or a share of the footprint "
                                                  "(25%)")
        if not m.group(2) and 0 < float(m.group(1)) <= 1:  # a config's 0.5 is a share; here, half a byte
            raise OpcostError(f"--budget {text}", f"a number without a unit is bytes here (in a config, a share): "
                                                  f"give {float(m.group(1)):.0%} for a share, or {text}B for bytes")
        return "size", float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not 0 <= share <= 1:
        raise OpcostError(f"--budget {text}", "a share of the footprint lies between 0% and 100%")
    return "share", share


def budget_bytes(spec, problem: Problem) -> int:
    """A budget in bytes of the fast tier: a size (``2GiB``, ``512MB``, ``1048576``) or a share of the placeable
    footprint (``25%``, or a number in [0, 1] from a config): what must stay fast plus that share of the rest. A size
    below what must stay fast is one line naming it."""
    kind, value = parse_budget(spec)
    if kind == "share":
        return problem.must_stay_fast + int(round(value * (problem.footprint - problem.must_stay_fast)))
    _check(problem, int(value), f"--budget {str(spec).strip()}")
    return int(value)


def nonneg(values) -> np.ndarray:
    return np.maximum(np.asarray(values, dtype=float), 0.0)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# --- solvers -------------------------------------------------------------------------------------------------------

def _check(problem: Problem, budget: int, what: str | None = None) -> None:
    if budget < problem.must_stay_fast:
        names = [g.name for g in problem.groups if g.pinned]
        why = "; ".join(n for n in problem.notes if "must stay" in n)
        raise OpcostError(what or f"budget {human(budget)}",
                          f"{human(budget)} is below the {human(problem.must_stay_fast)} that must stay on the fast "
                          f"tier {problem.fast} ({', '.join(names[:3])}{' ...' if len(names) > 3 else ''}: {why})")


def optimise(problem: Problem, budget: int, settings: AdviseSettings = AdviseSettings()) -> Plan:
    """The placement of least predicted time with at most ``budget`` bytes on the fast tier, solved exactly
    (``scipy.optimize.milp``; see the module docstring)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    _check(problem, budget)
    t0 = time.perf_counter()
    b, lin, inter, pinned = problem.bytes, problem.lin[0], problem.inter[0], problem.pinned
    free = [i for i in range(1, len(problem.groups)) if not pinned[i]]
    classes: dict[tuple, list[int]] = {}
    for i in free:
        key = (b[i], lin[i], inter[i]) if settings.merge else (i,)
        classes.setdefault(key, []).append(i)
    members = list(classes.values())
    k = len(members)
    act = not pinned[0]
    inter_k = [j for j, mem in enumerate(members) if act and inter[mem[0]] != 0]
    n = int(act) + k + len(inter_k)  # variables: x_A, n_k (slow members of class k), y_k = x_A * n_k
    size = np.array([len(mem) for mem in members], dtype=float)
    scale_t = 1e6 / max(float(np.abs(lin).sum() + np.abs(inter).sum()), 1e-30)
    scale_b = max(1.0, problem.footprint / 1e9)
    c = np.zeros(n)
    bytes_row = np.zeros(n)
    if act:
        c[0], bytes_row[0] = lin[0], b[0]
    c[int(act):int(act) + k] = [lin[mem[0]] for mem in members]
    bytes_row[int(act):int(act) + k] = [b[mem[0]] for mem in members]
    ub = np.concatenate([[1.0] * int(act), size, size[inter_k]])
    # rows: the budget (bytes moved off the fast tier), then per product y = x_A * n_k: y <= n_k, y <= K x_A,
    # y >= n_k + K x_A - K (McCormick; exact with x_A binary and 0 <= n_k <= K)
    r_i, c_i, vals = [0] * n, list(range(n)), list(bytes_row / scale_b)
    lo, hi = [(problem.footprint - budget) / scale_b], [np.inf]
    for idx, j in enumerate(inter_k):
        y, nk, big, r0 = int(act) + k + idx, int(act) + j, size[j], 1 + 3 * idx
        c[y] = inter[members[j][0]]
        for r, cols, v in ((r0, (y, nk), (1, -1)), (r0 + 1, (y, 0), (1, -big)), (r0 + 2, (y, nk, 0), (1, -1, -big))):
            r_i += [r] * len(cols)
            c_i += list(cols)
            vals += list(v)
        lo += [-np.inf, -np.inf, -big]
        hi += [0.0, 0.0, np.inf]
    if n == 0:
        return evaluate(problem, np.zeros(len(b), dtype=bool), "optimiser", budget, time.perf_counter() - t0)
    with _quiet():  # HiGHS prints solver traces on the process's stdout, which `opcost advise --json` owns
        matrix = coo_array((vals, (r_i, c_i)), shape=(len(lo), n)).tocsr()
        res = milp(c * scale_t, integrality=np.ones(n), bounds=Bounds(np.zeros(n), ub),
                   constraints=LinearConstraint(matrix, lo, hi),
                   options={"time_limit": settings.time_limit_s, "mip_rel_gap": settings.gap})
    if res.x is None:  # stopped (time limit) before any placement: the better baseline, marked inexact
        plan = min(greedy(problem, budget), first_touch(problem, budget), key=lambda p: p.predicted_s)
        plan.method, plan.exact, plan.solve_s = "optimiser", False, time.perf_counter() - t0
        return plan
    x = np.round(res.x).astype(int)
    slow = np.zeros(len(problem.groups), dtype=bool)
    slow[0] = bool(x[0]) if act else False
    for j, mem in enumerate(members):  # which members of a class: the last used ones (any is as good)
        for i in sorted(mem, key=lambda i: -problem.groups[i].first_use)[:x[int(act) + j]]:
            slow[i] = True
    plan = evaluate(problem, _polish(problem, slow, budget), "optimiser", budget, time.perf_counter() - t0)
    plan.exact = res.status == 0
    return plan


@contextlib.contextmanager
def _quiet():
    """File descriptor 1 sent to /dev/null meanwhile (C code's prints included)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _polish(problem: Problem, slow: np.ndarray, budget: int) -> np.ndarray:
    """Back on the fast tier, largest first, every slow group that fits in what the budget leaves (a solver's tie:
    a group on the fast tier never costs more, see :func:`~opcost.analysis.advise.build_problem`)."""
    b = problem.bytes
    room = budget - b[~slow].sum()
    for i in sorted(np.flatnonzero(slow), key=lambda i: -b[i]):
        if b[i] <= room:
            slow[i], room = False, room - b[i]
    return slow


def greedy(problem: Problem, budget: int) -> Plan:
    """Greedy: from all on the fast tier, move the group with the most bytes saved per second lost (free moves
    first, larger first) until the fast tier holds at most ``budget`` bytes. A parameter group's loss changes only
    when the activations move (then the rest is sorted again); the activations' loss is kept up to date."""
    _check(problem, budget)
    t0 = time.perf_counter()
    b, lin, inter, pinned = problem.bytes, problem.lin[0], problem.inter[0], problem.pinned
    slow = np.zeros(len(b), dtype=bool)
    fast, act_lost = float(b.sum()), float(lin[0])

    def ratio(nbytes, lost):
        return np.where(lost > 0, nbytes / np.where(lost > 0, lost, 1.0), np.inf)

    def queue():
        rest = np.flatnonzero(~slow & ~pinned & (b > 0) & (np.arange(len(b)) > 0))
        r = ratio(b[rest], np.maximum(lin[rest] + float(slow[0]) * inter[rest], 0.0))
        return rest[np.lexsort((-b[rest], -r))], np.sort(r)[::-1]

    order, ratios = queue()
    pos = 0
    while fast > budget:
        act = not slow[0] and not pinned[0] and b[0] > 0
        if act and (pos >= len(order) or ratio(b[0], max(act_lost, 0.0)) >= ratios[pos]):
            slow[0], fast = True, fast - b[0]
            order, ratios = queue()
            pos = 0
        elif pos < len(order):
            i = order[pos]
            slow[i], fast, act_lost, pos = True, fast - b[i], act_lost + inter[i], pos + 1
        else:
            break
    return evaluate(problem, slow, "greedy", budget, time.perf_counter() - t0)


def first_touch(problem: Problem, budget: int) -> Plan:
    """First touch: groups in call order (a call's parameters before its inputs) take the fast tier while it has
    room for them, as an allocator that fills the fast tier first would place them; what must stay fast first."""
    _check(problem, budget)
    t0 = time.perf_counter()
    room = budget - problem.must_stay_fast
    slow = np.zeros(len(problem.groups), dtype=bool)
    for i in sorted(range(len(problem.groups)), key=lambda i: (problem.groups[i].first_use, i == 0)):
        g = problem.groups[i]
        if g.pinned:
            continue
        if g.bytes <= room:
            room -= g.bytes
        else:
            slow[i] = True
    return evaluate(problem, slow, "first_touch", budget, time.perf_counter() - t0)


def plans(problem: Problem, budget: int, settings: AdviseSettings = AdviseSettings()) -> dict[str, Plan]:
    """The optimiser's, the greedy and the first-touch plans for one budget."""
    return {"optimiser": optimise(problem, budget, settings), "greedy": greedy(problem, budget),
            "first_touch": first_touch(problem, budget)}
