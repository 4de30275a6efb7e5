"""Figures as a registry: one module per figure, one inputs object, every registered figure drawn by make_all."""
import importlib
import pkgutil

import pandas as pd
import pytest

from opcost import tables
from opcost.report import figures
from opcost.report.figures import FIGURES, FigureInputs, figure, make_all, registry


def _empty_inputs(**kw) -> FigureInputs:
    return FigureInputs(costed=pd.DataFrame(columns=["model", "mode", "batch", "op_type", "count", "total_s",
                                                     "backward_s", "total_j"]),
                        predictions=tables.frame(tables.PREDICTIONS, []),
                        measurements=tables.frame(tables.MEASUREMENTS, []), e2e=tables.frame(tables.E2E, []),
                        consistency=tables.frame(tables.CONSISTENCY, []), **kw)


def test_every_figure_module_registers_the_figure_named_after_it():
    modules = {m.name for m in pkgutil.iter_modules(figures.__path__)} - {"registry"}  # the registry itself
    assert set(FIGURES) == modules  # one module per figure, its name the file's: <name>.png
    for name, fig in FIGURES.items():
        assert fig.draw.__module__ == f"opcost.report.figures.{name}"


def test_make_all_draws_every_registered_figure_that_applies(tmp_path, monkeypatch):
    """Every registered figure whose condition holds is drawn from the one inputs object, into <name>.png; a figure
    registered in a new module needs nothing else."""
    seen = []

    def draw(f, path):
        seen.append((f, path.name))
        path.write_bytes(b"png")

    monkeypatch.setattr(registry, "FIGURES", {})
    figure("always")(draw)
    figure("decode_like", when=lambda f: f.decode is not None)(draw)
    inputs = _empty_inputs()
    assert [p.name for p in make_all(inputs, tmp_path)] == ["always.png"]
    assert seen == [(inputs, "always.png")] and not (tmp_path / "decode_like.png").exists()
    inputs.decode = pd.DataFrame({"context": [128]})
    assert [p.name for p in make_all(inputs, tmp_path / "b")] == ["always.png", "decode_like.png"]


def test_the_real_figures_draw_a_notice_where_they_have_nothing_to_show(tmp_path):
    """The figures that explain an absence (no traces, no placement tiers, no never-profiled models) draw it."""
    inputs = _empty_inputs()
    for name in ("trace_breakdown", "trace_overheads", "placement", "unseen", "tiers", "coplace"):
        FIGURES[name].draw(inputs, tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 5_000


def test_two_modules_cannot_register_one_name():
    with pytest.raises(ValueError, match="two figures named 'breakdown'"):
        figure("breakdown")(lambda f, path: None)
    importlib.reload(importlib.import_module("opcost.report.figures.breakdown"))  # re-registering its own: fine
    assert "breakdown" in FIGURES
