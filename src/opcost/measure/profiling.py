"""The profiling engines' shared parts: their settings (:class:`ProfileSettings`), which chunk and order a
configuration is measured in, the placement set-up, and the `measurements` rows of a measured configuration."""
from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from opcost.failures import failure
from opcost.measure.cache import cache_state
from opcost.measure.energy import NoMeter, missing
from opcost.measure.engine import net_of_engine
from opcost.measure.hostinfo import now
from opcost.measure.placement import (
    DEFAULT,
    Placement,
    Placer,
    matches,
    usable_tiers,
)
from opcost.measure.placement import Settings as PlacementSettings
from opcost.measure.timing import Measurement, TimingSettings

log = logging.getLogger(__name__)


def chunk_of(config_id: str, chunks: int) -> int:
    """The profiling chunk a configuration belongs to: stable, independent of which other configs exist."""
    return zlib.crc32(config_id.encode()) % chunks


def measurement_order(configs: pd.DataFrame) -> pd.DataFrame:
    """Configurations in a pseudo-random but stable order (by id hash), so slow drift of the machine spreads over
    all op types instead of biasing the ones measured last."""
    key = configs["config_id"].map(lambda c: zlib.crc32(("order" + c).encode()))
    return configs.assign(_k=key).sort_values("_k").drop(columns="_k")


# the way a configuration is timed; part of the profiling journal's key, so that a run resumed after an upgrade
# that changed it measures again instead of mixing rows of two methods (2: training rounds run the forward pass
# then the backward pass in reverse, with the autograd engine measured in the rotation; 3: sweep points' rotations
# visited twice)
METHOD_VERSION = 3


MAX_ROTATION = 128  # default configurations per rotation (all their replays are alive at once; journaled together)


@dataclass(frozen=True)
class Placing:
    """How a configuration's placements are made: the :class:`opcost.measure.placement.Placer`, the tiers usable
    here (fast first) and the config's placement settings."""

    placer: Placer
    tiers: list
    settings: PlacementSettings


def placement_tiers(placement: PlacementSettings, device: str, needed: int) -> tuple[list, Placer | None]:
    """(the configured tiers usable on this host, a Placer over them or None where fewer than ``needed``); skipped
    tiers, and a placement measuring the default placement only, are logged."""
    tiers, skipped = usable_tiers(placement, device) if placement.enabled else ([], {})
    for why in skipped.values():
        log.warning("placement skipped: %s", why)
    if placement.enabled and len(tiers) < needed:
        log.warning("placement: %d usable tier(s) here; measuring the default placement only", len(tiers))
    return tiers, Placer(tiers, device) if len(tiers) >= needed else None


def failure_status(e: BaseException) -> str:
    """The `status` of a failed measurement: one line naming the error."""
    return f"failed: {failure(e)}"


def rel_iqr(m) -> float:
    return m.iqr / m.median if m.median > 0 else float("inf")


@dataclass(frozen=True)
class ProfileSettings:
    """How isolated profiling measures (config `profile` and `placement`; see
    :func:`opcost.measure.profile.profile_configs`)."""
    timing: TimingSettings = field(default_factory=TimingSettings)
    cache: str = "fresh"
    order: str = "model"
    remeasure: int = 1
    visits: int = 2
    rotation_size: int = MAX_ROTATION
    e2e_every: int = 4
    placement: PlacementSettings = field(default_factory=PlacementSettings)

    @classmethod
    def from_config(cls, config: dict) -> ProfileSettings:
        """From a validated config (the cache state as :func:`cache_state` resolves it for the config's device)."""
        p = config["profile"]
        return cls(TimingSettings.from_config(p["timing"]), cache_state(p["cache"], config["device"]), p["order"],
                   int(p["remeasure"]), int(p["visits"]), int(p["rotation_size"]), int(p["e2e_every"]),
                   PlacementSettings.from_config(config["placement"]))


def matches_all(requested: str, verified: str) -> bool:
    """Every tensor of a placement verified on its requested tier."""
    req, ver = Placement.parse(requested), Placement.parse(verified)
    if len(req.inputs) != len(ver.inputs) or (req.params is None) != (ver.params is None):
        return False
    pairs = list(zip(req.tiers(), ver.tiers()))
    return all(v == "empty" or matches(r, part) for r, v in pairs for part in v.split("+"))


NO_STATS = dict.fromkeys(Measurement(np.array([]), 1, 0.0).stats())  # the statistics columns of a failed row


def result_rows(row: dict, result, failure, attempts: int, facts: dict, fast: str | None,
                engine_s: float | None = None):
    """Rows and samples of one configuration; ``result``: {(placement, phase): (verified, Measurement or None,
    energy columns or the failure, cache label)}. ``engine_s``: the autograd engine's cost per call measured with
    the default placement's backward, taken out of that row (:func:`opcost.measure.engine.net_of_engine`)."""
    base = {"config_id": row["config_id"], "op_type": row["op_type"], "mode": row["mode"], "source": "isolated",
            "workload": None, "attempts": attempts, **facts, "cache": None, "engine_s": None, **NO_STATS}
    if result is None:
        return [{**base, "phase": "forward", "placement": DEFAULT, "placement_verified": None, "placement_ok": None,
                 "baseline": True,
                 "status": failure or "failed: not measured", **missing(NoMeter()), "timestamp": now()}], []
    rows, samples = [], []
    for (plc, phase), (ver, m, e, label) in result.items():
        base["cache"] = label
        baseline = plc == DEFAULT or Placement.parse(plc).all_on(fast)
        if m is None:  # one placement failed; e holds the reason
            rows.append({**base, "phase": phase, "placement": plc, "placement_verified": None, "placement_ok": None,
                         "baseline": baseline, "status": e, **missing(NoMeter()), "timestamp": now()})
            continue
        if phase != "forward":  # backward writes gradients to default memory: its placement is not verified
            ver = None
        stats, seconds = m.stats(), [float(x) for x in m.samples]
        if phase == "backward" and plc == DEFAULT and engine_s is not None:
            stats, seconds = net_of_engine(stats, seconds, engine_s)
        rows.append({**base, "phase": phase, "placement": plc, "placement_verified": ver,
                     "placement_ok": None if ver is None else matches_all(plc, ver), "baseline": baseline,
                     "status": "ok", **stats, **e, "timestamp": now()})
        samples += [{"key": row["config_id"], "source": "isolated", "placement": plc, "phase": phase, "i": i,
                     "seconds": x} for i, x in enumerate(seconds)]
    return rows, samples
