"""The host's memory read bandwidth against working-set size: what bounds a memory-bound operator, and a decode step.

A decode step reads every weight once and the whole key/value cache (:mod:`opcost.analysis.decode`); its time is
bounded from below by those bytes over the rate at which the host reads a working set of that size, which falls
across the cache levels (from the last-level cache to DRAM). :func:`measure` times a reduction (``torch.sum``, a
streaming read the library vectorises) over float32 tensors of each size in :data:`SIZES`, on the device and
thread count of the measurements, repeated until :data:`MIN_SECONDS`; the fastest repetition, less the fastest call
of the same reduction over 16 elements (the per-call floor, which a bound on bytes leaves out), gives the bytes per
second (a bound is the best the host does). One measurement takes a few seconds. :func:`curve` keeps it per host,
device and thread count in the user's cache folder (beside the cost models:
:func:`opcost.analysis.training.cache_path`'s folder), measured again when older than :data:`MAX_AGE_S` or absent.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

SIZES = tuple(2 ** k for k in range(15, 31))  # 32 KiB … 1 GiB, a factor of 2 apart
MIN_SECONDS = 0.02  # per size
MAX_AGE_S = 7 * 24 * 3600.0


def measure(device: str = "cpu", threads: int | None = None, sizes=SIZES, budget_bytes: int | None = None) -> dict:
    """{"bytes": [...], "bytes_per_s": [...]}: the fastest read rate of each working-set size (bytes) on ``device``
    with ``threads`` threads (the process's when None), sizes above ``budget_bytes`` (default: an eighth of the
    memory free) left out."""
    import torch

    from opcost.model.sources import available_memory

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    free = available_memory(device)
    budget = budget_bytes or (free // 8 if free else 2 ** 28)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    def fastest(x) -> float:
        x.sum()
        sync()
        best, spent = np.inf, 0.0
        while spent < MIN_SECONDS or best == np.inf:
            t = time.perf_counter()
            x.sum()
            sync()
            dt = time.perf_counter() - t
            best, spent = min(best, dt), spent + dt
        return best

    out = {"bytes": [], "bytes_per_s": []}
    try:
        floor = fastest(torch.ones(16, dtype=torch.float32, device=dev))
        out["call_floor_s"] = floor
        for size in (s for s in sizes if s <= budget):
            t = fastest(torch.ones(size // 4, dtype=torch.float32, device=dev))
            out["bytes"].append(int(size))
            out["bytes_per_s"].append(float(size / max(t - floor, t / 10)))
    finally:
        torch.set_num_threads(before)
    return out


def at(curve: dict, nbytes):
    """Bytes per second the host reads a working set of ``nbytes`` at (a number, or an array of them: an array):
    the curve interpolated in log size, its ends held beyond it."""
    sizes, rates = np.log(curve["bytes"]), np.asarray(curve["bytes_per_s"], dtype=float)
    got = np.interp(np.log(np.maximum(np.asarray(nbytes, dtype=float), 1.0)), sizes, rates)
    return float(got) if got.ndim == 0 else got


def sustained(curve: dict, nbytes):
    """Bytes per second the host sustains reading a working set of ``nbytes``: :func:`at` on the curve made
    non-increasing in size (a larger working set never reads faster; the measured curve's ripples within one cache
    level are noise)."""
    rates = np.minimum.accumulate(np.asarray(curve["bytes_per_s"], dtype=float))
    return at({"bytes": curve["bytes"], "bytes_per_s": rates}, nbytes)


def kept_path(host: str, device: str, threads) -> Path:
    from opcost.analysis.training import cache_path

    return cache_path(".").parent / f"bandwidth-{host}-{device}-t{threads}.json"


def curve(host: str, device: str = "cpu", threads: int | None = None, refresh: bool = False) -> dict:
    """The read-bandwidth curve of this host (named ``host``, as the database names it) on ``device`` with
    ``threads`` threads: the kept one (:data:`MAX_AGE_S`), else measured now and kept, with its time
    (``measured_at``, seconds since the epoch)."""
    path = kept_path(host, device, threads)
    if not refresh and path.exists():
        try:
            kept = json.loads(path.read_text())
            if time.time() - float(kept["measured_at"]) < MAX_AGE_S and kept["bytes"]:
                return kept
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: measured again
    got = {**measure(device, threads), "measured_at": time.time(), "host": host, "device": device,
           "threads": threads}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got))
    except OSError:
        pass  # a read-only cache folder: measured on each call
    return got
