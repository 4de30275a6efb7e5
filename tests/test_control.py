"""A workload timed in turn with a profiled control (opcost.measure.control)."""
import pandas as pd
import pytest

from opcost.config import StageConfig, controls, validate
from opcost.measure import control


def test_rounds_rotate_the_order_so_that_none_is_always_first():
    seen = []
    got = control.rounds({k: (lambda k=k: seen.append(k) or len(seen)) for k in "abc"}, 3)
    assert seen == list("abcbcacab") and got == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}


def test_the_controls_are_the_first_profiled_models_at_their_smallest_batch_in_each_mode():
    cfg = validate({"models": {"cnn": {"model": "resnet18", "batch_sizes": [8, 2]},
                               "bert": {"model": "tiny_bert", "modes": ["inference", "training"]},
                               "dlrm": {"model": "tiny_dlrm"}},
                    "predict_only": {"never": {"model": "mobilenet_v2"}}, "batch_sizes": [4],
                    "modes": ["inference"]})
    got = controls(cfg)
    assert {mode: [(c[0], c[1]["model"], c[2]) for c in cs] for mode, cs in got.items()} == {
        "inference": [("cnn", "resnet18", 2), ("bert", "tiny_bert", 4)], "training": [("bert", "tiny_bert", 4)]}
    # only the never-profiled model's end-to-end job reads them (its params: a changed control reruns that job)
    e2e = StageConfig.of(cfg, "e2e", "never")
    assert e2e.never_profiled and [c[0] for c in e2e.controls["inference"]] == ["cnn", "bert"]
    assert StageConfig.of(cfg, "extract", "never").controls == {}
    assert StageConfig.of(cfg, "e2e", "cnn").controls == {} and not StageConfig.of(cfg, "e2e", "cnn").never_profiled


def test_a_time_in_turn_reads_in_the_database_minutes_of_its_controls_references():
    rows = pd.DataFrame({"method": ["dedicated", "control", "control", "control"], "timestamp": ["1", "2", "3", "3"],
                         "control": [None, "cnn/inference/b2", "cnn/inference/b2", "bert/inference/b4"],
                         "vs_control": [None, 9.0, 1.5, 30.0]})
    refs = {("cnn", 2, "inference"): (0.02, "rotation"), ("bert", 4, "inference"): (0.002, "rotation")}
    # the newest job's rows, the median over its controls: 1.5 x 20 ms and 30 x 2 ms
    assert control.in_database_minutes(rows, refs) == pytest.approx((0.03 + 0.06) / 2)
    assert control.in_database_minutes(rows, {("cnn", 2, "inference"): (0.02, "rotation")}) == pytest.approx(0.03)
    assert control.in_database_minutes(rows, {}) is None  # no control has a reference: none
    assert control.in_database_minutes(rows[rows["method"] == "dedicated"], refs) is None
