"""Shared set-up for the benchmark scripts (run from the repository root with the venv active)."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ["resnet18", "mobilenet_v3_small", "tiny_bert", "tiny_dlrm"]


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


def p90(values) -> float:
    s = pd.Series(list(values), dtype=float).dropna()
    return float(s.quantile(0.9)) if len(s) else float("nan")


def summary(**kv) -> None:
    print("SUMMARY " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kv.items()))
    sys.stdout.flush()


def model_entries(models: list[str], config_file: str | None) -> dict:
    """The validated config of the benchmark's models: each a plain name, or, with ``config_file``, the entries
    of that config (``models`` empty: all of them), e.g. a model-zoo transformer."""
    from opcost.config import load, validate, workloads

    cfg = load(config_file) if config_file else validate({"models": {m: {} for m in models}})
    keep = models or list(dict.fromkeys(m for m, _, _ in workloads(cfg, "models")))  # sweep points left out
    cfg["models"] = {m: cfg["models"][m] for m in keep}
    return cfg
