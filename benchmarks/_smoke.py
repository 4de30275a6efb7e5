"""The benchmarks' --smoke mode: the same code path on tiny inputs, in seconds (tests/test_benchmarks_smoke.py runs
each once, so that a change that breaks a benchmark fails the test suite). A smoke run's figures check that the
benchmark works, never what it measures."""
from __future__ import annotations

import copy

MODEL = "tiny_dlrm"  # the built-in recommender, shrunk as tests/data/tiny.yaml shrinks it: inference and training
MODELS = {MODEL: {"kwargs": {"tables": 2, "rows": 100, "dim": 8}}}

TIMING = {  # each measurement's caps, as tests/data/tiny.yaml sets them: well under a second per stage
    "profile": {"max_seconds": 0.02, "warmup_s": 0.001, "min_samples": 5, "min_sample_s": 0.0002},
    "e2e": {"max_seconds": 0.1, "warmup_s": 0.01, "min_samples": 5, "min_sample_s": 0.0002},
    "insitu": {"max_seconds": 0.1, "warmup_s": 0.01, "min_samples": 5},
}


def config() -> dict:
    """The validated config of a smoke run: :data:`MODELS` (the default sweeps' points left out) and the
    :data:`TIMING` caps, every other key its default."""
    from opcost.config import validate

    cfg = validate(copy.deepcopy({"models": MODELS, **{stage: {"timing": caps} for stage, caps in TIMING.items()}}))
    cfg["models"] = {m: cfg["models"][m] for m in MODELS}
    return cfg
