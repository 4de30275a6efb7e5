"""Fused inference fast paths are recorded, profiled and timed in situ as the model runs them."""
import torch

from opcost.measure.insitu import profile_insitu
from opcost.measure.timing import TimingSettings
from opcost.model import fastpath
from opcost.model.extract import extract
from opcost.model.replay import ModelCache, build
from opcost.model.sources import load_model
from opcost.model.workload import make_workload

SPEC = {"model": "tests.tiny_models:make_fast_encoder", "input_shapes": [[16, 8]]}


def _plain_aten(wl) -> dict:
    """aten operators of one plain iteration (no hooks, no modes), from the profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        wl.step()
    counts = {}
    for ev in prof.events():
        if ev.name.startswith("aten::"):
            counts[ev.name] = counts.get(ev.name, 0) + 1
    return counts


def test_a_fast_path_model_is_extracted_as_it_runs():
    wl = make_workload(load_model("enc", SPEC), 2, "inference")
    assert fastpath.probe(wl) == ["encoder.layers.0", "encoder.layers.1"]
    plain = _plain_aten(wl)
    assert plain["aten::_transformer_encoder_layer_fwd"] == 2  # the fused kernel, once per layer
    layers = extract(wl)
    calls = layers.groupby("op_type")["count"].sum().to_dict()
    assert calls == {"Linear": 1, "relu": 1, "TransformerEncoderLayer": 2, "sum": 1}, calls
    assert _plain_aten(wl) == plain  # nothing left hooked: the next plain iteration still runs the fast path
    enc = layers[layers["op_type"] == "TransformerEncoderLayer"]
    params = enc["params"].iloc[0]
    assert '"num_heads":4' in params and '"linear1.weight":[64,32]' in params  # what the config's cost depends on


def test_training_runs_no_fast_path_and_keeps_its_operators():
    wl = make_workload(load_model("enc", SPEC), 2, "training")
    assert fastpath.probe(wl) == []
    ops = set(extract(wl)["op_type"])
    assert "TransformerEncoderLayer" not in ops and {"Linear", "LayerNorm"} <= ops


def test_the_fused_layer_replays_on_its_fast_path_and_in_situ_agrees():
    wl = make_workload(load_model("enc", SPEC), 2, "inference")
    layers = extract(wl)
    row = layers[layers["op_type"] == "TransformerEncoderLayer"].iloc[0].to_dict()
    rep = build(row, ModelCache({"enc": SPEC}, "cpu", "float32"), "cpu")
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, rep.context():
            for _, fn in rep.callables():
                fn()
    finally:
        rep.close()
    assert "aten::_transformer_encoder_layer_fwd" in {ev.name for ev in prof.events()}
    settings = TimingSettings(max_seconds=0.05, min_samples=3, warmup_s=0.0, min_sample_s=0.0001)
    meas = profile_insitu(wl, settings, "cpu")[0]  # raises when the calls per iteration change between iterations
    assert "TransformerEncoderLayer" in set(meas["op_type"])


def test_a_path_the_observers_would_change_is_named():
    from opcost.model.sanity import warnings

    wl = make_workload(load_model("enc", SPEC), 2, "inference")
    assert warnings(wl) == []  # the fast path kept: a plain and an observed iteration run the same operators
    fastpath.mark(wl.model.module, [])  # as if opcost did not know this fast path
    found = warnings(wl)
    assert len(found) == 1 and found[0].startswith("the iteration opcost records runs other operators than a plain "
                                                   "one (a fast path its observers switch off?): "), found
    assert "aten::_transformer_encoder_layer_fwd" in found[0]


def test_kinetos_own_lines_are_left_out_of_standard_error_and_every_other_line_kept(tmp_path):
    """Kineto writes `USDT: ... profiler_start` to standard error on every profile, whatever its log level; opcost
    extract printed two such lines per profiled step. They are dropped; a line of the block's own stays, in order."""
    import subprocess
    import sys

    code = ("import os, torch\nfrom opcost.model.fastpath import cpu_profiler\n"
            "with cpu_profiler():\n"
            "    os.write(2, b'mine, before\\n'); torch.ones(3) + 1; os.write(2, b'mine, after\\n')\n"
            "os.write(2, b'after the block\\n')\n")
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert "USDT:" not in quiet and "gpuGetDeviceCount" not in quiet
    assert quiet.splitlines() == ["mine, before", "mine, after", "after the block"]
