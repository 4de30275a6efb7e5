"""Does choosing sweep points where the cost model is least certain beat drawing them at random?

A pool-based study on a finished run's database (default results/db; for the study, the run on
benchmarks/configs/generalisation.yaml, whose sweeps measured 120 points): its sweep points (point = one sweep
model at one batch size) are the pool. A fixed third of them (seeded) is the test set; the rest are candidates.
Starting from the database's model workloads alone (test configurations left out everywhere), ``--budget`` candidates
are added to the cost model's training data

* ``uncertain``: in ``--rounds`` rounds, each refitting the model and taking the candidates with the largest
  committee spread (:func:`opcost.analysis.sampling.choose`, as ``opcost sweep suggest`` does);
* ``random``: drawn at random, ``--seeds`` draws;

and the cost model fitted to each is scored on the test points' measured configurations (median and 90th
percentile of |estimate / measured - 1|), beside the model without sweep points and with every candidate. No
timing: every cost comes from the database. Ends with one SUMMARY line.

    python benchmarks/sweep_sampling.py [--db results/db] [--budget 24] [--rounds 4] [--seeds 5]
    python benchmarks/sweep_sampling.py --smoke --db DIR   # budget 1, one round, one seed: a functional check (e.g.
                                                           # on the database of a run on tests/data/tiny.yaml)
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import p90, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="results/db")
    ap.add_argument("--budget", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="one point, one round, one random draw (a functional check "
                                                         "on a tiny database)")
    args = ap.parse_args()
    if args.smoke:
        args.budget, args.rounds, args.seeds = 1, 1, 1

    from opcost import database
    from opcost.analysis import estimate
    from opcost.analysis.costmodel import CostModel
    from opcost.analysis.training import training_data
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.analysis.sampling import choose
    from opcost.model.sweep_points import PREFIX

    t0 = time.perf_counter()
    db = database.read_db(args.db)
    used, _ = estimate.conditions(db["measurements"])
    layers = db["layers"]
    data = training_data(layers, used, STATISTICS[DEFAULT_STATISTIC])
    data = data[data["phase"] == "forward"]
    sweep = layers[layers["model"].str.startswith(PREFIX)].assign(
        point=lambda d: d["model"] + "/b" + d["batch"].astype(str))
    points = sorted(sweep["point"].unique())
    rng = np.random.default_rng(0)
    test = set(rng.choice(points, len(points) // 3, replace=False))
    candidates = [p for p in points if p not in test]
    test_ids = set(sweep.loc[sweep["point"].isin(test), "config_id"])
    ids_of = sweep.groupby("point")["config_id"].agg(set)
    base_ids = set(layers.loc[~layers["model"].str.startswith(PREFIX), "config_id"]) - test_ids
    test_rows = data[data["config_id"].isin(test_ids)]
    print(f"pool: {len(points)} points ({len(candidates)} candidates, {len(test)} test, "
          f"{len(test_rows)} test configurations); {len(base_ids)} model configurations")

    def fit(chosen) -> CostModel:
        ids = base_ids | set().union(*(ids_of[p] for p in chosen)) - test_ids if chosen else base_ids
        return CostModel.fit(data[data["config_id"].isin(ids)])

    def score(model: CostModel) -> tuple[float, float]:
        err = (model.estimate(test_rows)["estimate"].to_numpy() / test_rows["seconds"].to_numpy() - 1)
        return float(np.median(np.abs(err))), p90(np.abs(err))

    rows = []
    for name, chosen in (("no sweep points", []), ("every candidate", candidates)):
        rows.append({"strategy": name, "points": len(chosen), **dict(zip(("median", "p90"), score(fit(chosen))))})
        print(rows[-1], flush=True)
    chosen: list[str] = []
    per_round = -(-args.budget // args.rounds)
    pool = sweep[sweep["point"].isin(candidates)]
    for _ in range(args.rounds):
        model = fit(chosen)
        left = pool[~pool["point"].isin(chosen)]
        chosen += choose(model, left, min(per_round, args.budget - len(chosen)), measured=set())
    rows.append({"strategy": "uncertain", "points": len(chosen), **dict(zip(("median", "p90"), score(fit(chosen))))})
    print(rows[-1], "chose", sorted(chosen), flush=True)
    for seed in range(args.seeds):
        drawn = list(np.random.default_rng(seed + 1).choice(candidates, args.budget, replace=False))
        rows.append({"strategy": f"random (seed {seed + 1})", "points": len(drawn),
                     **dict(zip(("median", "p90"), score(fit(drawn))))})
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print("\n" + table.to_string(index=False, float_format="%.3f"))
    rand = table[table["strategy"].str.startswith("random")]
    unc = table[table["strategy"] == "uncertain"].iloc[0]
    summary(points=len(points), budget=args.budget, uncertain_median=unc["median"], uncertain_p90=unc["p90"],
            random_median=float(rand["median"].median()), random_p90=float(rand["p90"].median()),
            random_best_median=float(rand["median"].min()),
            none_median=float(table.iloc[0]["median"]), all_median=float(table.iloc[1]["median"]),
            wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
