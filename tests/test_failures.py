"""The run's list of failures: stage failures and configurations whose profiling failed, in one table."""
import pandas as pd

from opcost import tables
from opcost.failures import collect, text


def _meas(cid, status, placement="default"):
    return {**dict.fromkeys(tables.MEASUREMENTS.names), "config_id": cid, "op_type": "Picky", "mode": "inference",
            "source": "isolated", "phase": "forward", "status": status, "placement": placement}


def test_collect_lists_stage_failures_and_configurations_that_no_placement_measured():
    stage = tables.frame(tables.FAILURES, [
        {"stage": "trace", "workload": "m/inference/b2", "config_id": "c1", "op_type": "Picky",
         "reason": "left out of the replayed iterations: ValueError: picky", "kind": "failed"},
        {"stage": "extract", "workload": "z/inference/b1", "config_id": None, "op_type": None, "reason": "boom",
         "kind": "failed"},
        {"stage": "e2e", "workload": "z/inference/b1", "config_id": None, "op_type": None, "reason": "boom",
         "kind": None}])  # a file of an older version: a failure
    meas = tables.frame(tables.MEASUREMENTS, [
        _meas("c1", "failed: ValueError: picky"),
        _meas("c2", "failed: OSError: no memory on tier far", placement="in:far"), _meas("c2", "ok"),
        _meas("c3", "ok")])
    layers = pd.DataFrame({"config_id": ["c1", "c2", "c3"], "model": "m", "mode": "inference", "batch": 2})
    got = collect(stage, meas, layers)
    assert got[["stage", "workload", "config_id"]].fillna("-").values.tolist() == [
        ["trace", "m/inference/b2", "c1"], ["profile", "m/inference/b2", "c1"],
        ["extract", "z/inference/b1", "-"], ["e2e", "z/inference/b1", "-"]]  # c2: measured in another placement
    assert got.loc[got["stage"] == "profile", "reason"].tolist() == ["ValueError: picky"]
    lines = text(got).splitlines()
    assert lines[0] == "1 workload(s) failed, 2 configuration failure(s):"
    assert lines[1] == "FAILED z/inference/b1 (extract, e2e): boom"
    assert text(got.iloc[:0]) == "no failures"


def test_warnings_are_listed_apart_from_failures():
    stage = tables.frame(tables.FAILURES, [
        {"stage": "extract", "workload": "n/inference/b2", "config_id": None, "op_type": None,
         "reason": "model n: its output holds NaN or infinite values", "kind": "warning"}])
    empty = tables.frame(tables.MEASUREMENTS, [])
    got = collect(stage, empty, pd.DataFrame(columns=["config_id", "model", "mode", "batch"]))
    assert text(got).splitlines() == ["no failures", "1 warning(s):",
                                      "warning n/inference/b2: model n: its output holds NaN or infinite values"]
