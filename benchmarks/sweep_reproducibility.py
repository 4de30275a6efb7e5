"""How reproducible are the sweep points' isolated costs between two runs, with one visit of their rotation and two?

The estimates for a model never profiled rest on the sweep points' costs (:mod:`opcost.model.sweeps`); a model's own
configurations are checked by its reference iteration timed in the same rounds, a sweep point's by nothing. On a
shared 2-vCPU host, a two-thread call can run 2-3x slower for seconds at a time (a vCPU lent elsewhere: the call waits
for its slow thread) with tight samples, so that one visit's median is wrong and says nothing of it. This benchmark
profiles the default config's sweep points (``config/config.yaml``) in four passes, alternating ``profile.visits``
1 and 2 (A B A B, so that the host's drift falls on both alike), and reports, per setting, how far its two passes'
costs of each configuration lie apart: the median and 90th percentile of |log(first / second)| (``p50_1``,
``p90_1``, ``p50_2``, ``p90_2``), the share more than 25% apart (``apart_1``, ``apart_2``) and the seconds a pass
took (``pass_s_1``, ``pass_s_2``). Target: two visits at least halve the share more than 25% apart, at most twice
the time.

    python benchmarks/sweep_reproducibility.py [--points N] [--batch B] [--record]
    python benchmarks/sweep_reproducibility.py --smoke     # three points, tiny timing: a functional check
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from _common import ROOT, SMOKE_TIMING, prepare, summary, workload_configs


def sweep_configs(limit: int | None, batch: int) -> tuple[pd.DataFrame, dict, dict]:
    """(the catalogue of the default config's sweep points at ``batch``, the config, their model entries)."""
    from opcost import config as cfgmod

    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    entries = cfgmod.sweep_entries(cfg)
    names = sorted(entries)[:limit] if limit else sorted(entries)
    cats = [workload_configs(n, batch, "inference", entries[n])[2] for n in names]
    return pd.concat(cats, ignore_index=True).drop_duplicates("config_id"), cfg, entries


def one_pass(configs: pd.DataFrame, entries: dict, settings) -> tuple[pd.Series, float]:
    """(forward cost per configuration, seconds the pass took)."""
    from opcost.measure.profile import profile_configs

    t0 = time.perf_counter()
    meas, _ = profile_configs(configs, entries, "cpu", "float32", settings)
    ok = meas[(meas["phase"] == "forward") & (meas["status"] == "ok")]
    return ok.set_index("config_id")["trimmed_mean_s"].astype(float), time.perf_counter() - t0


def apart(a: pd.Series, b: pd.Series) -> np.ndarray:
    """|log(a / b)| of the configurations both passes measured."""
    j = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    j = j[(j["a"] > 0) & (j["b"] > 0)]
    return np.abs(np.log(j["a"] / j["b"])).to_numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, help="the first N sweep points (default: all)")
    ap.add_argument("--batch", type=int, default=1, help="the points' batch size (the default study: 1 and 8)")
    ap.add_argument("--smoke", action="store_true", help="three points, tiny timing")
    args = ap.parse_args()
    from dataclasses import replace

    from opcost.measure.profiling import ProfileSettings
    from opcost.measure.timing import TimingSettings

    configs, cfg, entries = sweep_configs(3 if args.smoke else args.points, args.batch)
    prepare(int(cfg["threads"]))
    base = ProfileSettings.from_config(cfg)
    if args.smoke:
        base = replace(base, timing=TimingSettings(**SMOKE_TIMING["profile"]))
    print(f"{configs['config_id'].nunique()} configurations of {configs['workload'].nunique()} sweep points; "
          f"passes: visits 1, 2, 1, 2", flush=True)
    costs, secs = {1: [], 2: []}, {1: [], 2: []}
    for visits in (1, 2, 1, 2):
        c, s = one_pass(configs, entries, replace(base, visits=visits))
        costs[visits].append(c)
        secs[visits].append(s)
        print(f"visits {visits}: {len(c)} costs in {s:.1f} s", flush=True)
    out = {}
    for v in (1, 2):
        d = apart(*costs[v])
        print(f"visits {v}: |log ratio| between its two passes: median {np.median(d):.3f}, p90 "
              f"{np.quantile(d, 0.9):.3f}, {np.mean(d > np.log(1.25)):.0%} of {len(d)} more than 25% apart")
        out |= {f"p50_{v}": float(np.median(d)), f"p90_{v}": float(np.quantile(d, 0.9)),
                f"apart_{v}": float(np.mean(d > np.log(1.25))), f"pass_s_{v}": float(np.mean(secs[v]))}
    summary(configs=int(configs["config_id"].nunique()), batch=args.batch, **out)


if __name__ == "__main__":
    main()
