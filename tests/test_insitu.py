"""In-situ profiling: every configuration timed inside model iterations, same schema as isolated rows."""
import pandas as pd

from opcost.measure.insitu import profile_insitu
from opcost.measure.timing import TimingSettings
from opcost.model.extract import extract, record_calls
from opcost.model.sources import load_model
from opcost.model.workload import make_workload
from opcost.tables import MEASUREMENTS

SETTINGS = TimingSettings(max_seconds=0.1, min_samples=4, warmup_calls=1)


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


def test_insitu_training_times_backward_per_configuration():
    wl = make_workload(load_model("mlp", {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}), 4,
                       "training")
    cap = record_calls(wl)
    meas, _, _ = profile_insitu(wl, SETTINGS, "cpu", capture=cap)
    bwd = meas[meas["phase"] == "backward"]
    linear_ids = {cid for cid, c in zip(cap.config_ids("training"), cap.calls) if c.op_type == "Linear"}
    assert linear_ids <= set(bwd["config_id"])  # every Linear's backward (addmm, t, accumulate-grad) is timed
    assert (bwd["median_s"] > 0).all()


def test_insitu_rows_concatenate_with_isolated_rows():
    wl = make_workload(load_model("tiny_dlrm", {"kwargs": {"tables": 1, "rows": 20}}), 1, "inference")
    meas, _, _ = profile_insitu(wl, SETTINGS, "cpu")
    both = pd.concat([meas, meas.assign(source="isolated", workload=None)])
    assert list(both.columns) == MEASUREMENTS.names
