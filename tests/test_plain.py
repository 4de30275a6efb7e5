"""A plain process (the user's own script) timed in turn with opcost's: opcost.measure.plain."""
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


def test_a_plain_process_that_cannot_build_the_model_says_why():
    with pytest.raises(RuntimeError, match="the plain process failed: .*nowhere"):
        plain.time_plain("gone", {"model": "nowhere:make"}, 1, "inference", CONFIG, SETTINGS, lambda: None)


def test_the_gap_is_the_ratio_in_turn_and_a_prediction_is_set_against_the_plain_time():
    e2e = pd.DataFrame({"model": ["m", "m", "n"], "mode": "inference", "batch": 2, "method": ["dedicated", "plain",
                                                                                             "dedicated"],
                        "median_s": [1.0, 1.3, 1.0], "timestamp": "2026-11-30T00:00:00",
                        "vs_opcost": [None, 1.25, None]})
    assert plain.plain_gaps(e2e) == {"m/inference/b2": pytest.approx(0.25)}  # the ratio in turn, not 1.3 / 1.0
    pred = pd.DataFrame({"model": ["m", "n"], "mode": "inference", "batch": 2, "error": [0.0, 0.1]})
    got = plain.against_plain(pred, e2e)["error_plain"]
    assert got.iloc[0] == pytest.approx(1 / 1.25 - 1) and pd.isna(got.iloc[1])  # n has no plain row
    older = e2e.assign(vs_opcost=None)  # a database of an earlier version: the gap was not timed in turn
    assert pd.isna(plain.against_plain(pred, older)["error_plain"].iloc[0])
