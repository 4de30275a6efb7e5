"""The cache state a timed call finds: warm (its inputs reused, in cache) or cold (its inputs rotating over a pool of
copies larger than the last-level cache); config ``profile.cache``."""
from __future__ import annotations

from opcost.model.replay import input_bytes

MAX_POOL = 64


def cache_state(cache: str, device: str) -> str:
    """Config `profile.cache` resolved: `auto` is `fresh` on CPUs and `warm` on GPUs (back-to-back calls between
    CUDA events, the established GPU method; rotation on GPUs times each call with its own events)."""
    if cache == "auto":
        return "warm" if str(device).startswith("cuda") else "fresh"
    return cache


def cold_pool(row: dict, cache: str, llc: int | None) -> tuple[int, str]:
    """(input copies a configuration rotates over, its `cache` label). Warm: 1, `warm`. Cold: enough copies to
    exceed twice the last-level cache, at most :data:`MAX_POOL` (1 where the inputs alone are larger), labelled
    `cold:N`, or `cold-capped:N` when the cap left them smaller (small inputs may still hit in cache)."""
    if cache == "warm":
        return 1, "warm"
    need, nbytes = 2 * (llc or 32 * 1024 * 1024), max(1, input_bytes(row))
    n = int(min(MAX_POOL, max(1, -(-need // nbytes))))
    return n, f"{'cold' if n * nbytes >= need or n == 1 else 'cold-capped'}:{n}"


def pool_size(row: dict, cache: str, llc: int | None) -> int:
    """Input copies a configuration rotates over (see :func:`cold_pool`)."""
    return cold_pool(row, cache, llc)[0]


def cache_label(row: dict, cache: str, llc: int | None) -> str:
    """The `cache` column of a configuration's rows (see :func:`cold_pool`)."""
    return cold_pool(row, cache, llc)[1]
