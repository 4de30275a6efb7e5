"""Figures under results/figures: what each operator type costs per model, and whether the costs add up.

A registry (:mod:`opcost.report.figures.registry`): each figure is one module of this package with one function,
``draw(inputs, path)``, registered with ``figure`` under the name of its file (``<name>.png``); every figure reads
the one ``FigureInputs`` the figures stage loads (``FigureFiles.read``). A new figure is a new module here (and its
caption in workflow/report/figures.rst); ``make_all`` finds it.
"""
from __future__ import annotations

import importlib
import pkgutil

from opcost.report.figures.registry import FIGURES, Figure, FigureFiles, FigureInputs, figure, make_all

for _module in pkgutil.iter_modules(__path__):  # every figure module registers its figure
    importlib.import_module(f"{__name__}.{_module.name}")

# the drawing functions other code and the tests call directly
from opcost.report.figures.breakdown import breakdown, breakdown_fractions  # noqa: E402
from opcost.report.figures.coplace import coplace_consistency  # noqa: E402
from opcost.report.figures.decode import decode_steps  # noqa: E402
from opcost.report.figures.trace_breakdown import trace_breakdown  # noqa: E402
from opcost.report.figures.trace_overheads import trace_overheads  # noqa: E402

__all__ = ["FIGURES", "Figure", "FigureFiles", "FigureInputs", "breakdown", "breakdown_fractions",
           "coplace_consistency", "decode_steps", "figure", "make_all", "trace_breakdown", "trace_overheads"]
