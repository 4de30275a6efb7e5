"""A plain process (the user's own script) timed in turn with opcost's: opcost.measure.plain."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opcost.measure import plain
from opcost.measure.timing import TimingSettings
from tests.tiny_models import _spin

CONFIG = {"device": "cpu", "dtype": "float32", "threads": 1}
SETTINGS = TimingSettings(target_rel_ci=0.01, max_seconds=1.0, warmup_s=0.02)


@pytest.mark.timing
def test_blocks_timed_in_turn_give_the_ratio_of_the_two_processes():
    # the child's model does 2 x 5 ms of CPU work per iteration, this process's step 5 ms: whatever the host's load
    # does to both in the same seconds (a loaded host stretches both alike), their ratio is 2
    spec = {"model": "tests.tiny_models:make_timed", "kwargs": {"layers": 2, "forward_ms": 5.0, "cpu": True},
            "input_shapes": [[8]]}
    row, samples = plain.time_plain("timed", spec, 1, "inference", CONFIG, SETTINGS, lambda: _spin(0.005, cpu=True))
    assert row["method"].iloc[0] == "plain" and row["vs_opcost"].iloc[0] == pytest.approx(2.0, rel=0.1)
    assert row["median_s"].iloc[0] >= 0.01 and len(samples) == row["n"].iloc[0]
    assert row["n"].iloc[0] >= plain.MIN_ROUNDS and (samples["source"] == "plain").all()


def test_a_plain_process_counts_the_page_faults_of_the_fresh_buffers_glibc_gives_it():
    # 48 MiB written fresh at every iteration: 12,288 pages of 4 KiB the plain process faults in each time; this
    # process's step (CPU work) takes none, so all of them are the plain process's extra
    spec = {"model": "tests.tiny_models:make_fresh_buffer", "input_shapes": [[8]]}
    row, _ = plain.time_plain("fresh", spec, 1, "inference", CONFIG, SETTINGS, lambda: _spin(0.01, cpu=True))
    if "[always]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text():
        pytest.skip("transparent huge pages always on: the buffer faults in 2 MiB pages")
    assert row["faults"].iloc[0] == pytest.approx(48 * 2**20 / 4096, rel=0.2)
    assert 0 < row["fault_s"].iloc[0] < 1e-4  # a fault and the zeroing of its page: about a microsecond
    extra = plain.fault_extra_s(row.iloc[0])
    assert extra == pytest.approx(row["faults"].iloc[0] * row["fault_s"].iloc[0])
    older = row.iloc[0].drop(["faults", "fault_s"])  # a row of a database of an earlier version
    assert np.isnan(plain.fault_extra_s(older))


def test_a_plain_process_that_cannot_build_the_model_says_why():
    with pytest.raises(RuntimeError, match="the plain process failed: .*nowhere"):
        plain.time_plain("gone", {"model": "nowhere:make"}, 1, "inference", CONFIG, SETTINGS, lambda: None)


def test_the_gap_is_the_ratio_in_turn_and_a_prediction_is_set_against_the_plain_time():
    e2e = pd.DataFrame({"model": ["m", "m", "n"], "mode": "inference", "batch": 2, "method": ["dedicated", "plain",
                                                                                             "dedicated"],
                        "median_s": [1.0, 1.3, 1.0], "timestamp": "2026-11-30T00:00:00",
                        "vs_opcost": [None, 1.25, None]})
    assert plain.plain_gaps(e2e) == {"m/inference/b2": pytest.approx(0.25)}  # the ratio in turn, not 1.3 / 1.0
    pred = pd.DataFrame({"model": ["m", "n"], "mode": "inference", "batch": 2, "error": [0.0, 0.1],
                         "measured_s": 1.0})
    got = plain.against_plain(pred, e2e)["error_plain"]
    assert got.iloc[0] == pytest.approx(1 / 1.25 - 1) and pd.isna(got.iloc[1])  # n has no plain row
    older = e2e.assign(vs_opcost=None)  # a database of an earlier version: the gap was not timed in turn
    assert pd.isna(plain.against_plain(pred, older)["error_plain"].iloc[0])
    faulted = e2e.assign(faults=[None, 1000.0, None], fault_s=[None, 1e-4, None])
    assert plain.fault_extras(faulted) == {"m/inference/b2": pytest.approx(0.1)}  # 1,000 faults of 0.1 ms


def test_the_gap_of_a_workload_names_its_page_faults_where_the_plain_process_counted_any():
    e2e = pd.DataFrame({"model": "m", "mode": "inference", "batch": [8, 8, 1, 1],
                        "method": ["dedicated", "plain", "dedicated", "plain"], "median_s": [1.0, 1.1, 0.1, 0.1],
                        "timestamp": "2026-11-30T00:00:00", "vs_opcost": [None, 1.1, None, 1.0],
                        "faults": [None, 14000.0, None, 0.0], "fault_s": [None, 1.5e-6, None, 1.5e-6]})
    gap, of = plain.workload_gap(e2e, "m", 8, "inference")
    assert gap == pytest.approx(0.1) and "14,000 page faults per iteration" in of and "21 ms" in of
    gap, of = plain.workload_gap(e2e, "m", 1, "inference")  # none counted: nothing said of them
    assert gap == pytest.approx(0.0) and "page faults" not in of
