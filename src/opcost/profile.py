"""Isolated profiling: each operator configuration timed alone, by the timing core, on the configured device."""
from __future__ import annotations

import logging
import time
import zlib

import pandas as pd

from .energy import NoMeter, missing
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


def _measure_config(row: dict, models: ModelCache, device: str, settings: TimingSettings, energy):
    """[(phase, Measurement, energy columns)] for one configuration; raises when it cannot be replayed."""
    rep = build(row, models, device)
    with rep.context():
        return [(phase, measure(fn, settings, device), energy(fn)) for phase, fn in rep.callables()]


def _rel_iqr(m) -> float:
    return m.iqr / m.median if m.median > 0 else float("inf")


def profile_configs(configs: pd.DataFrame, models_cfg: dict, device: str, dtype: str,
                    settings: TimingSettings, placement: str = "default", remeasure: int = 1,
                    on_result=None, energy=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every configuration; returns (`measurements` rows, `samples` rows).

    Configurations flagged noisy are measured again, up to ``remeasure`` more times, after all the others (at
    another moment of the machine's life); per phase the attempt with the lowest IQR/median is kept and
    ``attempts`` records how many were made. A configuration that cannot be replayed gets a row with status
    ``failed: ...`` and the others go on. ``on_result(rows, samples)`` is called once per finished configuration
    (the journal hook). ``energy(fn)`` returns the energy columns of a phase (default: missing, meter none)."""
    energy = energy or (lambda fn: missing(NoMeter()))
    models = ModelCache(models_cfg, device, dtype)
    facts = host_facts(device)
    best: dict[str, list] = {}  # config_id -> [(phase, Measurement, energy columns)]
    attempts: dict[str, int] = {}
    failed: dict[str, str] = {}
    ordered = measurement_order(configs).to_dict("records")
    by_id = {r["config_id"]: r for r in ordered}
    todo = [r["config_id"] for r in ordered]
    final: dict[str, tuple] = {}  # config_id -> (rows, samples), built once, when the configuration is settled
    last_round = max(0, remeasure)
    for round_ in range(1 + last_round):
        t_round = time.perf_counter()
        for k, cid in enumerate(todo, 1):
            row = by_id[cid]
            attempts[cid] = attempts.get(cid, 0) + 1
            try:
                result = _measure_config(row, models, device, settings, energy)
            except Exception as e:  # one bad configuration must not lose the others
                log.warning("[%d/%d] %s %s failed: %s", k, len(todo), cid, row["op_type"], e)
                failed[cid] = f"failed: {type(e).__name__}: {e}".splitlines()[0][:300]
                result = None
            if result is not None:
                failed.pop(cid, None)
                old = {ph: (m, e) for ph, m, e in best.get(cid, [])}
                best[cid] = [(ph, m, e) if ph not in old or _rel_iqr(m) < _rel_iqr(old[ph][0]) else (ph, *old[ph])
                             for ph, m, e in result]
                eta = (time.perf_counter() - t_round) / k * (len(todo) - k)
                for ph, m, _ in result:
                    log.info("[%d/%d] %s %-14s %-8s median %.3g ms n=%d rel_ci=%.3f%s%s  ETA %.0f s", k, len(todo),
                             cid, row["op_type"], ph, m.median * 1e3, m.n, m.rel_ci, " NOISY" if m.noisy else "",
                             f" (attempt {attempts[cid]})" if attempts[cid] > 1 else "", eta)
            still_noisy = cid in best and any(m.noisy for _, m, _ in best[cid])
            if not still_noisy or round_ == last_round:
                final[cid] = _rows(row, best.get(cid), failed.get(cid), attempts[cid], facts, placement)
                if on_result is not None:
                    on_result(*final[cid])
        todo = [cid for cid in todo if cid not in final]
        if not todo:
            break
        log.info("re-measuring %d noisy configurations (round %d of %d)", len(todo), round_ + 1, last_round)
    rows = [r for cid in by_id for r in final[cid][0]]
    samples = [x for cid in by_id for x in final[cid][1]]
    return frame(MEASUREMENTS, rows), frame(SAMPLES, samples)


def _rows(row: dict, result, failure, attempts: int, facts: dict, placement: str):
    base = {"config_id": row["config_id"], "op_type": row["op_type"], "mode": row["mode"], "source": "isolated",
            "workload": None, "placement": placement, "attempts": attempts, **facts}
    if result is None:
        return [{**base, "phase": "forward", "status": failure or "failed: not measured", **missing(NoMeter()),
                 "timestamp": now()}], []
    rows, samples = [], []
    for phase, m, e in result:
        rows.append({**base, "phase": phase, "status": "ok", **m.stats(), **e, "timestamp": now()})
        samples += [{"key": row["config_id"], "source": "isolated", "phase": phase, "i": i, "seconds": float(x)}
                    for i, x in enumerate(m.samples)]
    return rows, samples
