"""How fast does Snakemake build the DAG as a study grows to 10,000 operator configurations?

opcost's DAG does not grow with configurations one job each: configurations are split into `profile.chunks`
jobs by id hash, and workloads (model x mode x batch) are the unit of extraction, in-situ and end-to-end jobs. A
study of N configurations is modelled as N/100 workloads (real studies see 30-200 configurations per workload) and
N/100 profiling chunks (~100 configurations, minutes, per job). For each N the dry run (`snakemake -n`) of a fresh
working directory is timed, side by side. ``--cprofile N`` runs each dry run under cProfile instead and prints
its N most expensive calls (cumulative): where a slow dry run spends its time (Snakemake's per-job resource
evaluation, the rules' params, imports).

    python benchmarks/dag_scale.py [--sizes 100 1000 10000] [--cprofile 25]
"""
from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from _common import ROOT, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100, 1000, 10000])
    ap.add_argument("--cprofile", type=int, metavar="N", help="profile each dry run; print its N costliest calls")
    args = ap.parse_args()
    results = {}
    for n in args.sizes:
        workloads = max(1, n // 100)
        batches = [1, 2, 4, 8]
        models = {f"m{i}": {"model": "resnet18"} for i in range(math.ceil(workloads / len(batches)))}
        cfg = {"models": models, "batch_sizes": batches, "profile": {"chunks": max(1, n // 100)}}
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "c.yaml").write_text(yaml.safe_dump(cfg))
            profiler = ["-m", "cProfile", "-o", "dry.prof"] if args.cprofile else []
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, *profiler, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-n",
                                   "--configfile", "c.yaml", "--quiet", "all"], cwd=d, capture_output=True,
                                  text=True)
            dt = time.perf_counter() - t0
            if args.cprofile and proc.returncode == 0:
                import pstats

                pstats.Stats(str(Path(d) / "dry.prof")).sort_stats("cumulative").print_stats(args.cprofile)
        if proc.returncode != 0:
            sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
        results[n] = dt
        print(f"{n:>6} configurations: {len(models) * len(batches):>4} workloads, {cfg['profile']['chunks']:>4} "
              f"profiling chunks: dry run {dt:6.2f} s", flush=True)
    summary(**{f"dry_run_s_{n}": v for n, v in results.items()})


if __name__ == "__main__":
    main()
