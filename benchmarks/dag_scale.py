"""How fast does Snakemake build the DAG as a study grows to 100,000 operator configurations?

opcost's DAG does not grow with configurations one job each: configurations are split into `profile.chunks`
jobs by id hash, and workloads (model x mode x batch) are the unit of extraction, in-situ and end-to-end jobs. A
study of N configurations is modelled as N/100 workloads (real studies see 30-200 configurations per workload) and
N/100 profiling chunks (~100 configurations, minutes, per job). For each N the dry run (`snakemake -n`) of a fresh
working directory is timed (``dry_run_s``: it includes the preflight's import of the model libraries, which checks
every model name once, `opcost.preflight`), then a second dry run in the same directory (``again_s``: the preflight
remembered, the DAG alone, as every later command of the study sees it). ``--cprofile N`` runs each first dry run
under cProfile instead and prints its N most expensive calls (cumulative): where a slow dry run spends its time
(Snakemake's per-job work, the rules' params, imports). Target (issue 46): 100,000 configurations within 15 s.

    python benchmarks/dag_scale.py [--sizes 100 1000 10000] [--cprofile 25]
    python benchmarks/dag_scale.py --smoke     # 100 configurations: a functional check, seconds
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

from _common import summary, workflow_command


def dry_run(where: Path, profile: bool = False) -> float:
    """Seconds of one quiet dry run of the workflow on ``where``/c.yaml, in ``where`` (under cProfile, to
    ``where``/dry.prof, with ``profile``); exits with its output when it fails."""
    cmd, env = workflow_command("-n", "--configfile", "c.yaml", "--quiet", "--", "all")
    if profile:
        cmd[1:1] = ["-m", "cProfile", "-o", "dry.prof"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100, 1000, 10000])
    ap.add_argument("--cprofile", type=int, metavar="N", help="profile each dry run; print its N costliest calls")
    ap.add_argument("--smoke", action="store_true", help="100 configurations only")
    args = ap.parse_args()
    sizes = [100] if args.smoke else args.sizes
    results = {}
    for n in sizes:
        workloads = max(1, n // 100)
        batches = [1, 2, 4, 8]
        models = {f"m{i}": {"model": "resnet18"} for i in range(math.ceil(workloads / len(batches)))}
        cfg = {"models": models, "batch_sizes": batches, "profile": {"chunks": max(1, n // 100)}}
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            first = dry_run(Path(d), bool(args.cprofile))
            if args.cprofile:
                import pstats

                pstats.Stats(str(Path(d) / "dry.prof")).sort_stats("cumulative").print_stats(args.cprofile)
            again = dry_run(Path(d))
        results[f"dry_run_s_{n}"], results[f"again_s_{n}"] = first, again
        print(f"{n:>6} configurations: {len(models) * len(batches):>4} workloads, {cfg['profile']['chunks']:>4} "
              f"profiling chunks: dry run {first:6.2f} s, again {again:6.2f} s", flush=True)
    summary(**results)


if __name__ == "__main__":
    main()
