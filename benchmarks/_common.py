"""Shared set-up for the benchmark scripts (run from the repository root with the venv active)."""
from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RECORDS = Path(os.environ.get("OPCOST_RECORDS") or ROOT / "benchmarks" / "records")  # where records are written
# `--record` (or OPCOST_RECORD=1): summary() also writes benchmarks/records/<benchmark>.json. The flag is taken out
# of sys.argv here, on import, before the benchmark's own argparse sees it.
_ARGV = [a for a in sys.argv if a != "--record"]
RECORD = len(_ARGV) < len(sys.argv) or os.environ.get("OPCOST_RECORD") == "1"
sys.argv[:] = _ARGV
DEFAULT_MODELS = ["resnet18", "mobilenet_v3_small", "tiny_bert", "tiny_dlrm"]
# the timing caps of a benchmark's --smoke run (a functional check, not a measurement), per config section
SMOKE_TIMING = {"profile": {"max_seconds": 0.02, "warmup_s": 0.001, "min_samples": 3, "min_sample_s": 0.0002},
                "e2e": {"max_seconds": 0.05, "warmup_s": 0.005, "min_samples": 5, "min_sample_s": 0.0002},
                "insitu": {"max_seconds": 0.1, "min_samples": 3}}


def prepare(threads: int) -> None:
    import torch

    from opcost.measure.memory import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(threads)


def workload_configs(model: str, batch: int, mode: str = "inference", spec: dict | None = None):
    """(workload, layers, configs) for one model (``spec``: its config entry; default: a plain name)."""
    from opcost.database import catalog
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    wl = make_workload(load_model(model, spec or {}), batch, mode)
    layers = extract(wl)
    return wl, layers, catalog(layers)


def interleaved_ratios(x, refs: list, rounds: int, settings) -> tuple[list[float], float, list[float], list[list]]:
    """(per reference the median over rounds of T_x / T_ref, median T_x, per reference its median T_ref, per reference
    the rounds' ratios) of a workload and ``refs`` timed in turn, each round all of them, the order rotated every
    round; each time the trimmed mean of a :func:`opcost.measure.timing.measure` of one iteration."""
    import numpy as np

    from opcost.measure.control import rounds as in_turn
    from opcost.measure.timing import measure

    order = [x, *refs]
    got = in_turn({i: (lambda w=w: measure(w.step, settings, "cpu").trimmed_mean) for i, w in enumerate(order)},
                  rounds)
    times = [got[i] for i in range(len(order))]  # x, then each reference
    ratios = [[a / b for a, b in zip(times[0], tr)] for tr in times[1:]]
    return ([float(np.median(q)) for q in ratios], float(np.median(times[0])),
            [float(np.median(tr)) for tr in times[1:]], ratios)


TINY = ROOT / "tests" / "data" / "tiny.yaml"  # the suite's tiny config (its models: tests/tiny_models.py)


def workflow_command(*args) -> tuple[list[str], dict]:
    """The command line and environment that run Snakemake on this repository's workflow (the repository on
    PYTHONPATH: a config's ``module:callable`` models of tests/tiny_models.py import in its jobs)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args], env


def p90(values) -> float:
    s = pd.Series(list(values), dtype=float).dropna()
    return float(s.quantile(0.9)) if len(s) else float("nan")


def summary(**kv) -> None:
    """Print the benchmark's SUMMARY line; with ``--record`` (or OPCOST_RECORD=1) also write its record."""
    print("SUMMARY " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kv.items()))
    sys.stdout.flush()
    if RECORD and "--smoke" in _ARGV:  # a functional check's figures are no measurement to show
        print("record: not written for a --smoke run", file=sys.stderr)
    elif RECORD:
        path = write_record(kv)
        print(f"record: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)


def record_path(argv: list[str]) -> Path:
    """benchmarks/records/<benchmark>.json; a run with ``--config FILE`` or ``--mode MODE`` adds ``@<file stem>`` and
    ``@<mode>``, so that two configs (or inference and training) of one benchmark keep a record each."""
    name = Path(argv[0]).stem
    for option in ("--config", "--mode"):
        for i, arg in enumerate(argv):
            if arg == option and i + 1 < len(argv):
                name += "@" + Path(argv[i + 1]).stem
            elif arg.startswith(option + "="):
                name += "@" + Path(arg.split("=", 1)[1]).stem
    return RECORDS / f"{name}.json"


def host_summary() -> dict:
    """The host a record was measured on: CPU model, the machine's cores (not those a benchmark pinned itself to),
    GPU (None without CUDA), torch version."""
    import os

    import torch

    from opcost.measure.hostinfo import cpu_model

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "gpu": gpu, "torch": torch.__version__}


def evidence(argv: list[str]) -> dict:
    """What a record's figures rest on besides its host: the repository's commit (None outside a git checkout), the
    paths of the code and configs changed since it (uncommitted: the figures are of that code, not the commit's),
    and a hash of each file the command names (``--config FILE``...), so that a record can be traced to the code and
    inputs that produced it."""
    import hashlib
    import subprocess

    def git(*args) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                                  timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    commit = (git("rev-parse", "HEAD") or "").strip() or None
    changed = [line[3:] for line in (git("status", "--porcelain", "--", "src", "benchmarks", "workflow", "config",
                                         "scripts") or "").splitlines()
               if not line[3:].startswith("benchmarks/records/")]
    files = {}
    for arg in argv[1:]:
        path = Path(arg)
        if arg.endswith((".yaml", ".yml", ".json")) and path.is_file():
            files[arg] = hashlib.sha1(path.read_bytes()).hexdigest()[:12]
    return {"commit": commit, "uncommitted": changed, "files": files}


def _json_value(v):
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f if math.isfinite(f) else str(f)


_SUMMARIES: list[dict] = []  # this process's SUMMARY lines (training_split prints one per model)


def write_record(kv: dict, argv: list[str] | None = None) -> Path:
    """Replace this benchmark's record (date UTC, host, command as run, its :func:`evidence`, and the key/values of
    every SUMMARY line this process printed so far, in order: ``summaries``)."""
    from opcost.measure.hostinfo import now

    _SUMMARIES.append({k: _json_value(v) for k, v in kv.items()})
    argv = list(_ARGV if argv is None else argv)
    script = Path(argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path(argv[0])
    record = {"benchmark": Path(argv[0]).stem, "date": now(), "host": host_summary(),
              "command": shlex.join(["python", str(shown), *argv[1:]]), **evidence(argv),
              "summaries": list(_SUMMARIES)}
    path = record_path(argv)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return path


def model_entries(models: list[str], config_file: str | None) -> dict:
    """The validated config of the benchmark's models: each a plain name, or, with ``config_file``, the entries
    of that config (``models`` empty: all of them), e.g. a model-zoo transformer."""
    from opcost.config import load, validate, workloads

    cfg = load(config_file) if config_file else validate({"models": {m: {} for m in models}})
    keep = models or list(dict.fromkeys(m for m, _, _ in workloads(cfg, "models")))  # sweep points left out
    cfg["models"] = {m: cfg["models"][m] for m in keep}
    return cfg
