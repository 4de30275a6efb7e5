"""Isolated profiling: each operator configuration timed alone, by the timing core, on the configured device."""
from __future__ import annotations

import logging
import zlib

import pandas as pd
import torch

from .hostinfo import host_facts, now
from .replay import ModelCache, build
from .tables import MEASUREMENTS, SAMPLES, frame
from .timing import TimingSettings, measure

log = logging.getLogger(__name__)


def chunk_of(config_id: str, chunks: int) -> int:
    """The profiling chunk a configuration belongs to: stable, independent of which other configs exist."""
    return zlib.crc32(config_id.encode()) % chunks


def measurement_order(configs: pd.DataFrame) -> pd.DataFrame:
    """Configurations in a pseudo-random but stable order (by id hash), so slow drift of the machine spreads over
    all op types instead of biasing the ones measured last."""
    key = configs["config_id"].map(lambda c: zlib.crc32(("order" + c).encode()))
    return configs.assign(_k=key).sort_values("_k").drop(columns="_k")


def profile_configs(configs: pd.DataFrame, models_cfg: dict, device: str, dtype: str,
                    settings: TimingSettings, placement: str = "default") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every configuration; returns (`measurements` rows, `samples` rows). A configuration that cannot be
    replayed gets a row with status ``failed: ...`` and the others go on."""
    models = ModelCache(models_cfg, device, dtype)
    facts = host_facts(device)
    rows, samples = [], []
    ordered = measurement_order(configs)
    total = len(ordered)
    for k, row in enumerate(ordered.to_dict("records"), 1):
        base = {"config_id": row["config_id"], "op_type": row["op_type"], "mode": row["mode"],
                "source": "isolated", "workload": None, "placement": placement, "meter": "none", "energy_j": None, **facts}
        try:
            rep = build(row, models, device)
            results = []
            with rep.context():
                for phase, fn in rep.callables():
                    results.append((phase, measure(fn, settings, device)))
        except Exception as e:  # one bad configuration must not lose the others
            log.warning("[%d/%d] %s %s failed: %s", k, total, row["config_id"], row["op_type"], e)
            rows.append({**base, "phase": "forward", "status": f"failed: {type(e).__name__}: {e}".splitlines()[0][:300],
                         "timestamp": now()})
            continue
        for phase, m in results:
            rows.append({**base, "phase": phase, "status": "ok", **m.stats(), "timestamp": now()})
            samples += [{"key": row["config_id"], "source": "isolated", "phase": phase, "i": i, "seconds": float(s)}
                        for i, s in enumerate(m.samples)]
            log.info("[%d/%d] %s %-14s %-8s median %.3g ms n=%d rel_ci=%.3f%s", k, total, row["config_id"],
                     row["op_type"], phase, m.median * 1e3, m.n, m.rel_ci, " NOISY" if m.noisy else "")
    return frame(MEASUREMENTS, rows), frame(SAMPLES, samples)


def set_threads(threads: int | None) -> None:
    if threads:
        torch.set_num_threads(int(threads))

