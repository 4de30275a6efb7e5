"""A database's rotation rows read in one minute of the host (opcost.analysis.speed)."""
import pandas as pd
import pytest

from opcost.analysis.speed import in_one_minute, reference_speeds
from opcost.measure.speed import speed_probe


def _rows(host: str, speeds: list, median_ms: list) -> list[dict]:
    return [{"host": host, "device": "cpu", "threads": 2, "speed_s": s, "median_s": m * 1e-3,
             "trimmed_mean_s": m * 1e-3, "iqr_s": 0.1 * m * 1e-3, "ci_low_s": 0.9 * m * 1e-3,
             "ci_high_s": 1.1 * m * 1e-3, "n": 20} for s, m in zip(speeds, median_ms)]


def test_a_row_timed_while_the_host_ran_slow_is_read_in_the_median_minute_of_its_conditions():
    meas = pd.DataFrame(_rows("a", [1e-4, 1e-4, 2e-4, None], [1.0, 3.0, 4.0, 5.0]) + _rows("b", [3e-4], [6.0]))
    speeds = reference_speeds(meas)
    assert speeds.loc[("a", "cpu", 2)] == pytest.approx(1e-4) and speeds.loc[("b", "cpu", 2)] == pytest.approx(3e-4)
    out = in_one_minute(meas, speeds)
    assert list(out["median_s"] * 1e3) == pytest.approx([1.0, 3.0, 2.0, 5.0, 6.0])  # the slow row halved only
    assert out.loc[2, "ci_high_s"] == pytest.approx(2.2e-3) and out.loc[2, "n"] == 20  # counts are not times
    e2e = pd.DataFrame(_rows("a", [0.5e-4, None], [10.0, 10.0]))  # a reference timed in a fast minute: doubled
    assert list(in_one_minute(e2e, speeds)["median_s"] * 1e3) == pytest.approx([20.0, 10.0])
    assert in_one_minute(e2e, reference_speeds(meas.assign(speed_s=None))) is e2e  # no probe anywhere: as timed


def test_the_probe_is_one_fixed_call():
    probe = speed_probe("cpu")
    assert tuple(probe().shape) == (1, 64, 28, 28) and bool((probe() == probe()).all())
