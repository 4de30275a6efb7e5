"""In-situ profiling: every configuration timed inside model iterations, same schema as isolated rows."""
import time

import pandas as pd
import pytest
import torch

from opcost.measure import insitu
from opcost.measure.insitu import profile_insitu
from opcost.measure.timing import TimingSettings, clock_for
from opcost.model.extract import extract, record_calls
from opcost.model.sources import load_model
from opcost.model.workload import make_workload
from opcost.tables import MEASUREMENTS

SETTINGS = TimingSettings(max_seconds=0.1, min_samples=4, warmup_calls=1)
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def test_insitu_times_every_configuration_with_every_call():
    wl = make_workload(load_model("tiny_dlrm", {"kwargs": {"tables": 3, "rows": 50}}), 2, "inference")
    layers = extract(wl)
    meas, samples, e2e = profile_insitu(wl, SETTINGS, "cpu")
    assert list(e2e["method"]) == ["interleaved"] and e2e["n"].iloc[0] >= SETTINGS.min_samples
    assert e2e["median_s"].iloc[0] > 0
    assert list(meas.columns) == MEASUREMENTS.names and (meas["source"] == "insitu").all()
    assert set(meas["config_id"]) == set(layers["config_id"]) and set(meas["phase"]) == {"forward"}
    assert (meas["workload"] == "tiny_dlrm/inference/b2").all()
    # each call of each configuration is one sample per timed iteration
    per_config = samples.groupby("key").size()
    counts = layers.set_index("config_id")["count"]
    iterations = per_config / counts.loc[per_config.index]
    assert iterations.nunique() == 1 and iterations.iloc[0] >= SETTINGS.min_samples
    assert (meas["median_s"] > 0).all()


def _training_insitu(device: str):
    wl = make_workload(load_model("mlp", {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}, device), 4,
                       "training")
    cap = record_calls(wl)
    meas, samples, _ = profile_insitu(wl, SETTINGS, device, capture=cap)
    linear_ids = {cid for cid, c in zip(cap.config_ids("training"), cap.calls) if c.op_type == "Linear"}
    return meas, samples, linear_ids


@pytest.mark.parametrize("device", DEVICES)
def test_insitu_training_times_backward_per_configuration(device):
    meas, samples, linear_ids = _training_insitu(device)
    bwd = meas[meas["phase"] == "backward"]
    assert linear_ids <= set(bwd["config_id"])  # every Linear's backward (addmm, t, accumulate-grad) is timed
    assert (bwd["median_s"] > 0).all() and (meas["median_s"] > 0).all()
    assert (samples["seconds"] > 0).all()


class _HostEvent:
    """What the CUDA clock uses of a CUDA event, read off the host's clock: the clock's own bookkeeping of events
    runs on a machine without a GPU."""

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def test_the_cuda_clock_gives_each_mark_its_own_event_in_training(monkeypatch):
    """The CUDA clock records marks as events and reuses those whose spans were read. A backward mark ends one node's
    span and starts the next one's, so it is read twice; were it reused twice, two later marks would record one event
    and every span would read 0 (every training row on an H200, before this was kept once)."""
    monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    monkeypatch.setattr(insitu, "clock_for", lambda device: clock_for("cuda"))
    meas, samples, linear_ids = _training_insitu("cpu")
    assert linear_ids <= set(meas.loc[meas["phase"] == "backward", "config_id"])
    assert (samples["seconds"] > 0).all() and (meas["median_s"] > 0).all()


def test_insitu_rows_concatenate_with_isolated_rows():
    wl = make_workload(load_model("tiny_dlrm", {"kwargs": {"tables": 1, "rows": 20}}), 1, "inference")
    meas, _, _ = profile_insitu(wl, SETTINGS, "cpu")
    both = pd.concat([meas, meas.assign(source="isolated", workload=None)])
    assert list(both.columns) == MEASUREMENTS.names
