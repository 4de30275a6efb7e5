"""The figures' registry: the inputs every figure reads (:class:`FigureInputs`, loaded by
:meth:`FigureFiles.read`), :func:`figure` that registers a figure module's ``draw``, and :func:`make_all`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd


@dataclass
class FigureInputs:
    """Everything the figures read: ``costed`` (:func:`opcost.analysis.predict.costed_layers`), the run's
    `predictions`, `measurements`, `e2e` and `consistency` tables, the coverage loop's ``evaluations``, the tier check
    (``tiers``, results/placement/tiers.json), ``traces`` (part name `op_types`, `iterations`, `overhead_samples` ->
    trace table), the simultaneous placement profiling summaries (``coplace``; none when not enabled), the
    `predict_only` predictions (``unseen``; None without), the whole model on each tier (``tier_costs``), the decode
    curves (``decode``, :func:`opcost.analysis.decode_curves.curves`; None for a run without decode steps), the
    generate() questions (``generate``: the `generate` table; None without) and the workloads' `layers`."""
    costed: pd.DataFrame
    predictions: pd.DataFrame
    measurements: pd.DataFrame
    e2e: pd.DataFrame
    consistency: pd.DataFrame
    evaluations: list = field(default_factory=list)
    tiers: dict | None = None
    traces: dict = field(default_factory=dict)
    coplace: list | None = None
    unseen: pd.DataFrame | None = None
    tier_costs: pd.DataFrame | None = None
    decode: pd.DataFrame | None = None
    layers: pd.DataFrame | None = None
    generate: pd.DataFrame | None = None

    def trace(self, part: str) -> pd.DataFrame:
        """One trace table (empty without traces)."""
        return self.traces.get(part, pd.DataFrame(columns=["model", "mode", "batch", "kind"]))


@dataclass
class FigureFiles:
    """The files the figures are drawn from (paths; ``layers``, ``coplace``, ``unseen``, ``generate``: lists of paths;
    ``traces``: part name -> the workloads' trace tables of that part; ``loop``: results/loop/summary.json)."""
    layers: list
    measurements: str
    e2e: str
    predictions: str
    consistency: str
    loop: str
    tiers: str | None = None
    traces: dict = field(default_factory=dict)
    coplace: list = field(default_factory=list)
    unseen: list = field(default_factory=list)
    tier_costs: str | None = None
    generate: list = field(default_factory=list)

    def read(self, device: str, statistic: str) -> FigureInputs:
        """The tables the files hold, costed on ``device`` with ``statistic``."""
        from opcost import io, tables, trace_tables
        from opcost.analysis.predict import costed_layers

        layers = io.read_many(self.layers, tables.LAYERS)
        meas = io.read_parquet(self.measurements, tables.MEASUREMENTS)
        return FigureInputs(
            costed=costed_layers(layers, meas, device, statistic=statistic),
            predictions=io.read_parquet(self.predictions, tables.PREDICTIONS), measurements=meas,
            e2e=io.read_parquet(self.e2e, tables.E2E),
            consistency=io.read_parquet(self.consistency, tables.CONSISTENCY),
            evaluations=io.read_json(self.loop), tiers=io.read_json(self.tiers) if self.tiers else None,
            traces={part: io.read_many(paths, getattr(trace_tables, f"TRACE_{part.upper()}"))
                    for part, paths in self.traces.items()},
            coplace=[io.read_json(p) for p in self.coplace],
            unseen=io.read_many(self.unseen, tables.PREDICTIONS) if self.unseen else None,
            tier_costs=io.read_parquet(self.tier_costs, tables.TIER_COSTS) if self.tier_costs else None,
            layers=layers, generate=io.read_many(self.generate, tables.GENERATE) if self.generate else None)


@dataclass(frozen=True)
class Figure:
    name: str  # the file: <name>.png
    draw: Callable[[FigureInputs, Path], None]
    when: Callable[[FigureInputs], bool] | None = None  # drawn only when it holds (default: always)


FIGURES: dict[str, Figure] = {}


def figure(name: str, when: Callable[[FigureInputs], bool] | None = None):
    """Register ``draw(inputs, path)`` as the figure ``<name>.png`` (drawn only when ``when(inputs)`` holds)."""

    def register(draw):
        if name in FIGURES and FIGURES[name].draw.__module__ != draw.__module__:
            raise ValueError(f"two figures named {name!r}: {FIGURES[name].draw.__module__}, {draw.__module__}")
        FIGURES[name] = Figure(name, draw, when)
        return draw

    return register


def make_all(inputs: FigureInputs, outdir) -> list[Path]:
    """Every registered figure that applies to ``inputs``, into ``outdir``; the paths written."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fig in FIGURES.values():
        if fig.when is None or fig.when(inputs):
            fig.draw(inputs, outdir / f"{fig.name}.png")
            paths.append(outdir / f"{fig.name}.png")
    return paths
