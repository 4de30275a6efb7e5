"""A workload timed in turn with a profiled control (opcost.measure.control)."""
import pandas as pd
import pytest

from opcost.config import StageConfig, validate, workloads
from opcost.measure import control


def test_rounds_rotate_the_order_so_that_none_is_always_first():
    seen = []
    got = control.rounds({k: (lambda k=k: seen.append(k) or len(seen)) for k in "abc"}, 3)
    assert seen == list("abcbcacab") and got == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}


def test_the_control_is_the_first_profiled_model_at_its_smallest_batch_in_each_mode():
    cfg = validate({"models": {"cnn": {"model": "resnet18", "batch_sizes": [8, 2]},
                               "bert": {"model": "tiny_bert", "modes": ["inference", "training"]}},
                    "predict_only": {"never": {"model": "mobilenet_v2"}}, "batch_sizes": [4],
                    "modes": ["inference"]})
    got = control.choose(workloads(cfg), lambda m: {"of": m})
    assert got == {"inference": ["cnn", {"of": "cnn"}, 2], "training": ["bert", {"of": "bert"}, 4]}
    # only the never-profiled model's end-to-end job reads it (its params: a changed control reruns that job)
    e2e = StageConfig.of(cfg, "e2e", "never")
    assert e2e.never_profiled and e2e.controls["inference"][0] == "cnn" and e2e.controls["inference"][2] == 2
    assert StageConfig.of(cfg, "extract", "never").controls == {}
    assert StageConfig.of(cfg, "e2e", "cnn").controls == {} and not StageConfig.of(cfg, "e2e", "cnn").never_profiled


def test_a_time_in_turn_reads_in_the_database_minutes_of_its_controls_reference():
    rows = pd.DataFrame({"method": ["dedicated", "control", "control"], "timestamp": ["1", "2", "3"],
                         "control": [None, "cnn/inference/b2", "cnn/inference/b2"], "vs_control": [None, 9.0, 1.5]})
    refs = {("cnn", 2, "inference"): (0.02, "rotation")}
    assert control.in_database_minutes(rows, refs) == pytest.approx(0.03)  # the newest row's ratio
    assert control.in_database_minutes(rows, {}) is None  # its control has no reference: none
    assert control.in_database_minutes(rows[rows["method"] == "dedicated"], refs) is None
