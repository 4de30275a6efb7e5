"""Models that run but whose costs are suspect: each named by a warning at extraction, reported in the summary."""
import pytest

from opcost import io, stages, tables
from opcost.config import validate
from opcost.model.sanity import warnings
from opcost.model.sources import load_model
from opcost.model.workload import make_workload

# factory in tests.tiny_models -> the start of its one warning (None: no warning)
CASES = [
    ("make_nan", "its output holds NaN or infinite values (100% of 1 output tensor(s))"),
    ("make_mutating", "an iteration changes its input(s) [0] in place"),
    ("make_early_exit", "its operators change with its inputs (data-dependent control flow): 10 aten calls per "
                        "iteration on the inputs opcost extracted, 5 on others"),  # 2 blocks run, then 1
    ("make_mlp", None),  # an in-place residual add on its own activations is not a change of its inputs
    ("make_activations", None),
]


def _workload(factory: str, mode: str, batch: int = 2):
    width = {"make_activations": 16}.get(factory)
    spec = {"model": f"tests.tiny_models:{factory}", "input_shapes": [[width or 8]],
            "kwargs": {"width": width} if width else {}}
    return make_workload(load_model(factory, spec), batch, mode)


@pytest.mark.parametrize("factory, warning", CASES, ids=[c[0] for c in CASES])
def test_each_suspect_behaviour_is_named(factory, warning):
    found = warnings(_workload(factory, "inference"))
    if warning is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(warning), found


def test_training_workloads_are_checked_too():
    assert [w.split(" ")[0] for w in warnings(_workload("make_early_exit", "training"))] == ["its"]
    assert warnings(_workload("make_mlp", "training")) == []


def test_the_extract_stage_records_warnings_and_still_extracts(tmp_path):
    cfg = validate({"models": {"nan": {"model": "tests.tiny_models:make_nan", "input_shapes": [[8]]}},
                    "threads": 1, "affinity": "none"})
    stages.extract(cfg, "nan", "inference", 2, tmp_path / "l.parquet", tmp_path / "f.parquet")
    assert len(io.read_parquet(tmp_path / "l.parquet", tables.LAYERS)) > 0  # measured all the same
    fail = io.read_parquet(tmp_path / "f.parquet", tables.FAILURES)
    assert fail[["stage", "workload", "kind"]].values.tolist() == [["extract", "nan/inference/b2", "warning"]]
    assert fail["reason"].iloc[0].startswith("model nan: its output holds NaN or infinite values")
