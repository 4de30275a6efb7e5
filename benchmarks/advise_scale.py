"""How large a placement problem does `opcost advise` solve exactly within seconds?

The advisor's integer program (opcost.analysis.placement_problem.optimise: scipy.optimize.milp, HiGHS) has one variable
per class of interchangeable parameter groups, one for the activations, and one product variable with three McCormick
rows per class whose cost depends on the activations' tier. Synthetic problems of G distinct groups (nothing to merge:
the worst case) are solved at three budgets (25, 50, 75% of the placeable footprint), side by side with the greedy and
first-touch plans: bytes log-uniform from 1 KiB to 64 MiB, extra seconds per byte spread 10x between groups, half of the
groups interacting with the activations (sub- or super-additive). A second series models deep models of repeated layers:
G groups of 12 kinds (a transformer block's), which merging solves as 12 integers.

    python benchmarks/advise_scale.py [--sizes 100 1000 10000 30000] [--limit 5]
    python benchmarks/advise_scale.py --smoke   # 100 groups only: a check

Prints one line per size (worst solve time of the three budgets, whether all were proven optimal, the optimiser's
predicted slowdown against greedy's), then a SUMMARY line: ``largest_exact_under_limit``, the largest G whose three
solves each finished, proven optimal, within ``--limit`` seconds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from _common import summary


def synthetic(n_groups: int, kinds: int | None = None, seed: int = 0):
    """A Problem of ``n_groups`` parameter groups (of ``kinds`` distinct ones, repeated, when given) and the
    activations (30% of the footprint; moving them costs half the iteration)."""
    from opcost.analysis.placement_problem import ACTIVATIONS, Group, Problem

    rng = np.random.default_rng(seed)
    distinct = kinds or n_groups
    size = np.exp(rng.uniform(np.log(2 ** 10), np.log(2 ** 26), distinct)).astype(int)
    lin = size * 1e-10 * np.exp(rng.uniform(0, np.log(10), distinct))
    inter = np.where(rng.random(distinct) < 0.5, lin * rng.uniform(-0.5, 0.5, distinct), 0.0)
    pick = np.arange(n_groups) % distinct
    size, lin, inter = size[pick], lin[pick], inter[pick]
    act_bytes = int(size.sum() * 0.3 / 0.7)
    fast_s = float(lin.sum() * 2)
    groups = [Group(ACTIVATIONS, (ACTIVATIONS,), act_bytes, 0)] + [
        Group(f"g{i}", (f"g{i}.weight",), int(b), i + 1) for i, b in enumerate(size)]
    z = np.zeros(n_groups + 1)
    lin3 = np.vstack([np.concatenate([[fast_s / 2], lin])] * 3)
    inter3 = np.vstack([np.concatenate([[0.0], inter])] * 3)
    return Problem({"model": "synthetic", "batch": 1, "mode": "inference"}, "fast", "slow", groups,
                   (fast_s, fast_s, fast_s), fast_s, 0.0, lin3, inter3, z, z)


def run(n_groups: int, kinds: int | None, limit: float) -> dict:
    from opcost.analysis.placement_problem import (
        AdviseSettings,
        budget_bytes,
        first_touch,
        greedy,
        optimise,
    )

    problem = synthetic(n_groups, kinds)
    settings = AdviseSettings(time_limit_s=max(limit * 4, 10.0))
    worst, exact, versus_greedy, versus_ft, greedy_s = 0.0, True, [], [], 0.0
    for share in (0.25, 0.5, 0.75):
        budget = budget_bytes(share, problem)
        t0 = time.perf_counter()
        opt = optimise(problem, budget, settings)
        worst = max(worst, time.perf_counter() - t0)
        exact &= opt.exact
        t0 = time.perf_counter()
        g = greedy(problem, budget)
        greedy_s = max(greedy_s, time.perf_counter() - t0)
        versus_greedy.append(opt.slowdown[0] / g.slowdown[0])
        versus_ft.append(opt.slowdown[0] / first_touch(problem, budget).slowdown[0])
    return {"solve_s": worst, "exact": exact, "greedy_s": greedy_s, "vs_greedy": float(np.min(versus_greedy)),
            "vs_first_touch": float(np.min(versus_ft))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100, 1000, 3000, 10000, 30000])
    ap.add_argument("--limit", type=float, default=5.0, help="seconds a solve may take (default 5)")
    ap.add_argument("--smoke", action="store_true", help="100 groups only (a functional check, in seconds)")
    args = ap.parse_args()
    if args.smoke:
        args.sizes = [100]
    largest, results = 0, {}
    print(f"{'groups':>8} {'kinds':>7} {'solve_s':>8} {'exact':>6} {'greedy_s':>9} {'opt/greedy':>11} {'opt/ft':>8}")
    for kinds in (None, 12):
        for n in args.sizes:
            r = run(n, kinds, args.limit)
            results[(n, kinds)] = r
            print(f"{n:>8} {kinds or 'all':>7} {r['solve_s']:>8.3f} {str(r['exact']):>6} {r['greedy_s']:>9.3f} "
                  f"{r['vs_greedy']:>11.4f} {r['vs_first_touch']:>8.4f}", flush=True)
            if kinds is None and r["exact"] and r["solve_s"] <= args.limit:
                largest = max(largest, n)
    top = max(args.sizes)
    summary(largest_exact_under_limit=largest, limit_s=args.limit,
            **{f"solve_s_{n}": results[(n, None)]["solve_s"] for n in args.sizes},
            **{f"repeated_solve_s_{top}": results[(top, 12)]["solve_s"]},
            best_vs_greedy=min(r["vs_greedy"] for r in results.values()))


if __name__ == "__main__":
    main()
