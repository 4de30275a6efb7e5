"""A model check before a long run: build the model, run one iteration, extract its operator configurations and
replay each once (forward; in training also backward), as profiling will.

``opcost check-models CONFIG`` runs it on every workload of a config; ``benchmarks/zoo.py`` on a model zoo.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from opcost.errors import OpcostError
from opcost.failures import failure


@dataclass
class CheckResult:
    """What :func:`check_workload` found: the workload's configurations and calls, and the failures (``stage``:
    `load`, `extract`, or `replay` with the configuration)."""

    workload: str
    configs: int = 0
    calls: int = 0
    error: str | None = None  # the model could not be built, run or extracted
    stage: str | None = None
    replay_failures: dict[str, str] = field(default_factory=dict)  # "config_id op_type" -> reason

    @property
    def ok(self) -> bool:
        return self.error is None and not self.replay_failures

    def first_failure(self) -> str | None:
        if self.error is not None:
            return f"{self.stage}: {self.error}"
        if self.replay_failures:
            what, why = next(iter(self.replay_failures.items()))
            return f"replay {what}: {why}"
        return None


def replay_failures(layers, models, device: str) -> dict[str, str]:
    """Replay every configuration of a `layers` table once (each phase; backward after a forward): {"config_id
    op_type": reason} of those that fail."""
    from opcost.model.replay import build

    failed = {}
    for row in layers.drop_duplicates("config_id").to_dict("records"):
        rep = None
        try:
            rep = build(row, models, device)
            with rep.context():
                for _, fn in rep.callables():
                    fn()
        except Exception as e:  # any replay failure is a finding, not a crash
            failed[f"{row['config_id']} {row['op_type']}"] = failure(e)
        finally:
            if rep is not None:
                rep.close()
    return failed


def check_workload(name: str, spec: dict, batch: int, mode: str, device: str = "cpu",
                   dtype: str = "float32") -> CheckResult:
    """Build model ``name`` from its config entry, run and extract one ``mode`` iteration at ``batch``, and replay
    each configuration once."""
    from opcost.model.extract import extract
    from opcost.model.replay import ModelCache
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload, workload_key

    res = CheckResult(workload_key(name, mode, batch))
    stage = "load"
    try:
        wl = make_workload(load_model(name, spec, device, dtype), batch, mode)
        stage = "extract"
        layers = extract(wl)
    except Exception as e:  # a model may raise anything: the finding, not a crash
        res.stage, res.error = stage, str(e) if isinstance(e, OpcostError) else failure(e)
        return res
    res.configs, res.calls = layers["config_id"].nunique(), int(layers["count"].sum())
    res.replay_failures = replay_failures(layers, ModelCache({name: spec}, device, dtype), device)
    return res
