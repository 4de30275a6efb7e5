"""What a warm process (opcost.warm) saves a workflow job, and whether it changes what the job measures.

Each round runs one job script twice, as Snakemake runs a rule's script (a fresh Python on the script file): once
in a process of its own (``OPCOST_WARM=0``) and once handed to the warm process, in alternating order. The job
imports what a measuring job imports, then times four callables with opcost's clock (a ResNet-18 iteration at batch
1, its 3x3 convolution, a BERT-base-sized Linear, an elementwise add) under the allocator and thread settings every
measuring job sets. Reported: the job's wall time each way (``job_cold_s``, ``job_warm_s``: medians over rounds),
the time to its first measurement (``start_cold_s``, ``start_warm_s``), and per callable the median over rounds of
the warm/cold ratio of its trimmed mean (``ratio_*``; 1.0 = the same measurement), with the largest deviation
(``worst_ratio_dev``). The warm process is started before the first round (a study pays that once).

    python benchmarks/warm_jobs.py [--rounds 6] [--seconds 1.0]
    python benchmarks/warm_jobs.py --smoke     # one round, short timings: a functional check
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, summary

JOB = """
from opcost.warm import hand_over
hand_over()
import json, os, sys, time
import opcost.stages  # what a measuring job's script imports
import torch, torchvision
from opcost.measure.memory import keep_freed_memory
from opcost.measure.timing import TimingSettings, measure
started = time.time() - float(os.environ["T0"])
keep_freed_memory()
torch.set_num_threads(int(os.environ["THREADS"]))
settings = TimingSettings(max_seconds=float(os.environ["SECONDS"]), min_samples=5)
model = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 224, 224)
conv, xc = torch.nn.Conv2d(64, 64, 3, padding=1), torch.randn(1, 64, 56, 56)
lin, xl = torch.nn.Linear(768, 3072), torch.randn(128, 768)
a, b = torch.randn(1, 64, 56, 56), torch.randn(1, 64, 56, 56)
out = {}
with torch.no_grad():
    for name, fn in (("model", lambda: model(x)), ("conv", lambda: conv(xc)), ("linear", lambda: lin(xl)),
                     ("add", lambda: a + b)):
        out[name] = measure(fn, settings).trimmed_mean
print(json.dumps({"start_s": started, "times": out}))
"""


def run_job(script: Path, warm: bool, seconds: float, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OPCOST_WARM": "1" if warm else "0", "SECONDS": str(seconds), "THREADS": str(threads),
           "T0": repr(time.time())}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"job ({'warm' if warm else 'cold'}) failed:\n{proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall": wall, **got}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing cap of each callable (s)")
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.seconds = 1, 0.05
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.py"
        script.write_text(JOB)
        run_job(script, True, 0.01, args.threads)  # the warm process started: a study pays this once
        cold, warm = [], []
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for w in order:
                (warm if w else cold).append(run_job(script, w, args.seconds, args.threads))
            print(f"round {r + 1}: job cold {cold[-1]['wall']:.2f} s, warm {warm[-1]['wall']:.2f} s; "
                  + ", ".join(f"{k} {warm[-1]['times'][k] / cold[-1]['times'][k]:.3f}" for k in cold[-1]["times"]),
                  flush=True)
    med = statistics.median
    ratios = {k: med(w["times"][k] / c["times"][k] for w, c in zip(warm, cold)) for k in cold[0]["times"]}
    summary(rounds=args.rounds, job_cold_s=med(c["wall"] for c in cold), job_warm_s=med(w["wall"] for w in warm),
            start_cold_s=med(c["start_s"] for c in cold), start_warm_s=med(w["start_s"] for w in warm),
            **{f"ratio_{k}": v for k, v in ratios.items()},
            worst_ratio_dev=max(abs(v - 1.0) for v in ratios.values()))


if __name__ == "__main__":
    main()
