"""What a validated config asks of this host, checked before the first job: its device, its energy meter, its
placement tiers (the fast tier present; with ``on_missing: strict`` every tier) and memory for its sweep points; and
the bytes of a model entry's inputs, which the model checks of :mod:`opcost.preflight` bound memory with."""
from __future__ import annotations

import math

from opcost.errors import OpcostError

# bytes per element of the input dtypes a model entry may name
ITEMSIZE = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1}


def problems(config: dict) -> list[str]:
    """Every problem of ``config`` on this host, one line each (empty: none), but for :func:`sweep_problems`, which
    builds the sweep points (remembered by :func:`opcost.preflight.problems`)."""
    return (device_problems(config) + _fast_tier_problems(config) + meter_problems(config)
            + _strict_tier_problems(config))


def batches(config: dict, entry: dict) -> list[int]:
    """The batch sizes a model entry is measured at: its own, else the config's."""
    return [int(b) for b in entry.get("batch_sizes") or config["batch_sizes"]]


def input_bytes(entry: dict, batch: int, dtype: str = "float32") -> int | None:
    """Bytes of one iteration's inputs at ``batch`` where the entry says their shapes (``input_shapes``; a
    transformers text model's ``seq_len`` token ids and mask; a torchvision or built-in image model's default
    image), else None (the source's own input size, known once the model is built)."""
    target = entry.get("model") or ""
    if entry.get("input_shapes"):
        size = ITEMSIZE.get(entry.get("input_dtype") or dtype, 4)
        return sum(math.prod(s) for s in entry["input_shapes"]) * batch * size
    if target.startswith("hf:"):
        return None if "seq_len" not in entry else 2 * int(entry["seq_len"]) * batch * 8
    return None


def device_problems(config: dict) -> list[str]:
    """A CUDA device the config names that torch does not find here (no model can be built there)."""
    device = str(config["device"])
    if not device.startswith("cuda"):
        return []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        return [f"config: device: {device!r} requested but torch finds "
                f"{'no CUDA device' if count == 0 else f'{count} CUDA device(s)'} on this host (torch "
                f"{torch.__version__}, CUDA build {torch.version.cuda or 'none'})"]
    return []


def meter_problems(config: dict) -> list[str]:
    """An energy meter asked for by name (``energy.meter: rapl`` or ``nvml``) that this host cannot read: every
    measuring job would fail on it (``auto`` goes on without one)."""
    choice = (config.get("energy") or {}).get("meter", "auto")
    if choice not in ("rapl", "nvml"):
        return []
    from opcost.measure.energy import detect

    try:
        detect(str(config["device"]), choice)
    except OpcostError as e:
        return [f"{e} (or energy.meter: auto, which goes on without a meter)"]
    except Exception as e:  # the meter's own library failing
        return [f"config: energy.meter: {choice}: {e} (or energy.meter: auto, which goes on without a meter)"]
    return []


def _fast_tier_problems(config: dict, sysfs=None) -> list[str]:
    """The fast tier (the first of ``placement.tiers``, which every slowdown is relative to) a CPU config names on a
    NUMA node this host lacks: skipped, it would leave a slower tier as the baseline without a word (with
    ``on_missing: strict``, :func:`_strict_tier_problems` names it, with every other tier this host lacks)."""
    placement = config.get("placement") or {}
    tiers = list((placement.get("tiers") or {}).items())
    if (not tiers or "numa" not in tiers[0][1] or str(config["device"]) != "cpu"
            or placement.get("on_missing") == "strict"):
        return []
    from opcost.measure import numa  # without torch

    (name, spec), nodes = tiers[0], numa.nodes(sysfs or numa.NODE_SYSFS)
    if not nodes or int(spec["numa"]) in nodes:
        return []
    return [f"config: placement.tiers.{name}: the fast tier (the first, which every slowdown is relative to) is "
            f"NUMA node {spec['numa']}, which this host lacks (nodes: {', '.join(map(str, nodes))}): put a tier it "
            "has first"]


def _strict_tier_problems(config: dict) -> list[str]:
    """With ``placement.on_missing: strict``, each tier this host or device lacks: an error before the first job, as
    the setting promises, not in the tier jobs."""
    placement = config.get("placement") or {}
    if placement.get("on_missing") != "strict" or not placement.get("tiers"):
        return []
    from opcost.measure.placement import Settings, discover, missing_reason

    found, device = discover(), str(config["device"])
    return [f"config: placement.tiers.{tier.name}: {why.split(': ', 1)[1]} (on_missing: strict; set skip to measure "
            "the other tiers)" for tier in Settings.from_config(placement).tiers
            if (why := missing_reason(tier, device, found))]


def tier_warnings(config: dict) -> list[str]:
    """What a config's placement tiers will not do as written, one line each (the run goes on): a tier of the other
    device's kind (skipped in every job), several names for one NUMA node (one placement measured again),
    co-placement with fewer than two tiers."""
    tiers = (config.get("placement") or {}).get("tiers") or {}
    device, out, by_node = str(config["device"]), [], {}
    for name, spec in tiers.items():
        if "cuda" in spec and not device.startswith("cuda"):
            out.append(f"placement.tiers.{name}: a GPU tier ({{cuda: {spec['cuda']}}}) places a CUDA device's "
                       f"tensors, but device is {device}: it is skipped (remove it, or set device: cuda)")
        elif "numa" in spec and device != "cpu":
            out.append(f"placement.tiers.{name}: a NUMA tier places CPU tensors, but device is {device}: it is "
                       "skipped (remove it, or use {cuda: host} for host memory)")
        elif "numa" in spec:
            by_node.setdefault(int(spec["numa"]), []).append(name)
    out += [f"placement.tiers: {', '.join(names)} are all NUMA node {node}: one placement, measured {len(names)} "
            "times" for node, names in by_node.items() if len(names) > 1]
    if (config.get("placement") or {}).get("simultaneous") and len(tiers) < 2:
        out.append("placement.simultaneous: co-placement moves tensors between two tiers, but placement.tiers names "
                   f"{len(tiers)}: its jobs measure nothing (add a slower tier, or set simultaneous: false)")
    return out


def sweep_problems(config: dict) -> list[str]:
    """A sweep point whose weights and inputs (a bound from below: its chain built on the meta device, nothing
    allocated) exceed the memory free: said before the first job, not by the job that runs out of memory."""
    from opcost.config import is_sweep

    points = {n: e for n, e in config["models"].items() if is_sweep(e)}
    if not points:
        return []
    import torch

    from opcost.model.sources import available_memory
    from opcost.model.sweeps import chain

    free, size = available_memory(str(config["device"])), ITEMSIZE.get(config["dtype"], 4)
    out = []
    for name, entry in points.items() if free else ():
        try:
            with torch.device("meta"):
                weights = sum(p.numel() for p in chain(**entry["kwargs"]).parameters()) * size
        except Exception:  # a point the meta device cannot build: its job builds it
            continue
        need = weights + (input_bytes(entry, max(batches(config, entry)), config["dtype"]) or 0)
        if need > free:
            out.append(f"config: sweeps: point {name} needs at least {need / 1e9:.3g} GB (weights and inputs), more "
                       f"than the {free / 1e9:.1f} GB free: use smaller sizes")
    return out
