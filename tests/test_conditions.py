"""Measurement conditions: cache state (warm / cold input pools), CPU affinity, last-level cache discovery."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from opcost.measure import rotation
from opcost.measure.cache import MAX_POOL, pool_size
from opcost.measure.hostinfo import cpus, driver_version_of, llc_bytes, parallel_speedup
from opcost.model.replay import ModelCache, build, input_bytes

SELECT = {"config_id": "x", "op": "aten.select.int", "op_type": "select", "scope": "functional",
          "mode": "inference",
          "replay": json.dumps({"args": [{"T": [64, 1024], "dtype": "float32", "stride": [1024, 1]}, 0, 1]})}


def test_llc_is_the_highest_level_data_cache(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert llc_bytes.__wrapped__(str(tmp_path)) == 32 * 1024 * 1024
    assert llc_bytes.__wrapped__(str(tmp_path / "absent")) is None


def test_the_parallel_speedup_probe_is_one_for_one_thread_and_leaves_the_thread_count_as_it_was():
    import torch

    before = torch.get_num_threads()
    assert parallel_speedup(1) == 1.0
    got = parallel_speedup(2, calls=50)
    assert got > 0 and got == got  # a finite ratio of two medians (any value: the host decides)
    assert torch.get_num_threads() == before


def test_cold_pool_exceeds_twice_the_llc_and_is_capped():
    assert input_bytes(SELECT) == 64 * 1024 * 4
    assert pool_size(SELECT, "warm", 32 << 20) == 1
    assert pool_size(SELECT, "cold", 4 << 20) == 32  # 32 x 256 KiB = 8 MiB = 2 x LLC
    assert pool_size(SELECT, "cold", 1 << 30) == MAX_POOL
    assert pool_size(SELECT, "cold", 64 << 10) == 1  # inputs alone larger than twice the LLC
    from opcost.measure.cache import cache_label

    assert cache_label(SELECT, "cold", 4 << 20) == "cold:32"
    assert cache_label(SELECT, "cold", 1 << 30) == "cold-capped:64"  # 64 x 256 KiB still fits such a cache
    assert cache_label(SELECT, "cold", 64 << 10) == "cold:1"


@pytest.mark.parametrize("pool", [1, 4])
def test_calls_rotate_over_the_input_pool(pool):
    rep = build(SELECT, ModelCache({}, "cpu", "float32"), "cpu", pool=pool)
    with rep.context():
        ptrs = [rep.outputs()[0].untyped_storage().data_ptr() for _ in range(2 * pool)]
    assert len(set(ptrs)) == pool  # select returns a view of its input: one storage per pool member
    assert ptrs[:pool] == ptrs[pool:]  # in turn


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to restrict the affinity to one")
def test_pinning_restricts_the_process_to_as_many_cpus_as_threads():
    code = ("from opcost.measure.hostinfo import pin_threads; import os; "
            "print(pin_threads(1), len(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    first = min(os.sched_getaffinity(0))
    assert out == [str(first), "1"]
    assert cpus()  # this process is untouched and reports its CPU list


def test_profiling_records_the_cache_state():
    import pandas as pd

    from opcost.measure.cache import cache_label
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings

    fast = TimingSettings(max_seconds=0.02, warmup_s=0.0, min_samples=3, min_sample_s=0.0001)
    configs = pd.DataFrame([SELECT])
    fresh, _ = profile_configs(configs, {}, "cpu", "float32", ProfileSettings(fast))
    warm, _ = profile_configs(configs, {}, "cpu", "float32", ProfileSettings(fast, cache="warm"))
    cold, _ = profile_configs(configs, {}, "cpu", "float32", ProfileSettings(fast, cache="cold"))
    assert fresh["cache"].tolist() == ["fresh"] and fresh["calls_per_sample"].tolist() == [1]
    assert warm["cache"].tolist() == ["warm"]
    twice, _ = profile_configs(configs, {}, "cpu", "float32",
                               ProfileSettings(fast, cache="warm", visits=2, remeasure=1))
    assert twice["status"].tolist() == ["ok"] and twice["attempts"].tolist()[0] in (2, 3)  # until two agree
    assert cold["cache"].tolist() == [cache_label(SELECT, "cold", llc_bytes())]
    assert (cold["status"] == "ok").all()


def test_rotation_context_configurations_rotate_but_are_not_recorded(monkeypatch):
    import pandas as pd

    from opcost.measure import profile as prof
    from opcost.measure.timing import TimingSettings

    seen = []
    real = rotation.measure_rotation

    def spy(rot, settings, device, **kw):
        seen.append((len(rot.calls), list(kw["targets"]), rot.shuffle, rot.sequence))
        return real(rot, settings, device, **kw)

    monkeypatch.setattr(rotation, "measure_rotation", spy)
    fast = TimingSettings(max_seconds=0.02, warmup_s=0.0, min_samples=3)
    add = {**SELECT, "config_id": "y", "op": "aten.add.Tensor", "op_type": "add", "positions": "[0, 2, 4]",
           "replay": json.dumps({"args": [{"T": [64, 1024], "dtype": "float32", "stride": [1024, 1]}, 2.0]})}
    broken = {**SELECT, "config_id": "z", "op": "aten.select.int", "replay": json.dumps({"args": []}),
              "positions": "[5]"}
    select = {**SELECT, "positions": "[1, 3]"}
    meas, samples = prof.profile_configs(pd.DataFrame([select]), {}, "cpu", "float32", prof.ProfileSettings(fast),
                                         context=pd.DataFrame([add, broken]))
    assert meas["config_id"].tolist() == ["x"] and set(samples["key"]) == {"x"}
    assert (meas["status"] == "ok").all()  # a failing context configuration is only left out
    # both rotated (in call order, the default), only the configuration itself decides when to stop
    assert seen[0][:3] == (2, [0], False)
    assert seen[0][3] == [1, 0, 1, 0, 1]  # a round is the call sequence: add, select, add, select, add


def test_configurations_rotate_with_their_own_workload_and_its_context():
    import pandas as pd

    from opcost.measure.rotation_engine import rotation_groups

    def cfg(cid, workload, mode="inference"):
        return {"config_id": cid, "mode": mode, "workload": workload}

    configs = pd.DataFrame([cfg("a1", "m/inference/b1"), cfg("a2", "m/inference/b1"), cfg("b1", "m/inference/b8"),
                            cfg("t1", "m/training/b1", "training")])
    context = pd.DataFrame([cfg("c1", "m/inference/b1"), cfg("c8", "m/inference/b8"), cfg("a2", "m/inference/b1")])
    groups = {tuple(sorted(r["config_id"] for r in g)): sorted(r["config_id"] for r in c)
              for g, c in rotation_groups(configs, context)}
    assert groups == {("a1", "a2"): ["c1"], ("b1",): ["c8"], ("t1",): []}
    small = rotation_groups(configs, context, size=2)  # at most 2 members per rotation, context included
    assert all(len(g) + len(c) <= 2 for g, c in small) and sum(len(g) for g, _ in small) == 4


def _profile_spied(monkeypatch, configs, models, e2e_every):
    """`profile_configs` in rotation with 40 rounds per configuration: (measurements, [(e2e row, samples)] it
    reported, [(callables, keyword arguments)] of each rotation it timed)."""
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings

    fast = TimingSettings(max_seconds=0.05, warmup_s=0.0, min_samples=40, max_samples=40, target_rel_ci=1e-9)
    got, seen, real = [], [], rotation.measure_rotation
    monkeypatch.setattr(rotation, "measure_rotation",
                        lambda rot, *a, **kw: seen.append((rot.calls, {"sequence": rot.sequence, "every": rot.every,
                                                                       "release": rot.release})) or real(rot, *a, **kw))
    meas, _ = profile_configs(configs, models, "cpu", "float32", ProfileSettings(fast, e2e_every=e2e_every),
                              on_e2e=lambda row, smp: got.append((row, smp)))
    return meas, got, seen


def test_rotation_times_the_whole_model_iteration_in_the_same_rounds(monkeypatch):
    """profile.e2e_every: the model's lead-in (iterations lasting about 5 ms) and then its iteration close every N-th
    round of the workload's rotation; the timed iteration (after iterations, as in a run) comes back as an `e2e`
    row of method `rotation`, in the `e2e` schema, with its samples."""
    from opcost.database import catalog
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload
    from opcost.tables import E2E, SAMPLES

    models = {"mlp": {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 16}, "input_shapes": [[8]]}}
    configs = catalog(extract(make_workload(load_model("mlp", models["mlp"]), 2, "inference")))
    meas, got, seen = _profile_spied(monkeypatch, configs, models, e2e_every=4)
    assert (meas["status"] == "ok").all() and meas["n"].min() >= 40
    (fns, kw), n = seen[0], len(configs)
    assert kw["sequence"][-2:] == [n, n + 1] and kw["every"][-2:] == [4, 4]
    assert fns[n] is not fns[n + 1]  # the µs-scale iteration's lead-in: the iteration, many times
    # each call's output lives until the call where the model drops it; the iterations' at once
    assert kw["release"][-2:] == [len(kw["sequence"]) - 2, len(kw["sequence"]) - 1]
    assert kw["release"][:len(kw["sequence"]) - 2] == [5, 2, 3, 5, 5, 5]  # see test_extract (the same model)
    [(row, smp)] = got  # one rotation (one workload): one row
    assert list(row.columns) == E2E.names and list(smp.columns) == SAMPLES.names
    r = row.iloc[0]
    assert (r["model"], r["batch"], r["mode"], r["method"]) == ("mlp", 2, "inference", "rotation")
    # timed in every 4th of the >= 40 recorded rounds (the warm-up's rounds are not recorded)
    assert 10 <= r["n"] <= meas["n"].max() // 4 + 1 and len(smp) == r["n"]
    assert set(smp["key"]) == {"mlp/inference/b2"} and (smp["seconds"] > 0).all()
    # a model iteration costs more than any one of its operators; timed_s: the calls it paired with
    assert r["median_s"] > meas["median_s"].max()
    calls = configs.set_index("config_id")["positions"].map(lambda p: len(json.loads(p)))
    assert r["timed_s"] == pytest.approx(float((meas.set_index("config_id")["median_s"] * calls).sum()))
    untimed, none, _ = _profile_spied(monkeypatch, configs, models, e2e_every=0)
    assert len(got) == 1 and not none and len(untimed) == len(meas)


def test_a_workload_whose_configurations_all_rotate_elsewhere_is_timed_in_their_rotations(monkeypatch):
    """A workload that owns no configuration (each is first in another workload, as resnet18 has all of resnet34's)
    has no rotation of its own: its model iteration is timed in the rotations of its configurations' groups, after
    the owner's, so that its prediction is checked against its time in the same minutes, weighted by its own calls
    (`timed_s`); without that, only a dedicated run minutes apart was its reference."""
    from opcost.database import catalog
    from opcost.measure.rotation_engine import guest_workloads
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    spec = {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 16}, "input_shapes": [[8]]}
    models = {"mlp": spec, "mlp_too": spec}
    layers = pd.concat([extract(make_workload(load_model(m, spec), 2, "inference")) for m in models],
                       ignore_index=True)
    configs = catalog(layers)
    assert (configs["workload"] == "mlp/inference/b2").all()
    assert guest_workloads(configs) == {"mlp_too/inference/b2"}
    meas, got, seen = _profile_spied(monkeypatch, configs, models, e2e_every=4)
    (fns, kw), n = seen[0], len(configs)
    assert len(fns) == n + 4 and fns[n + 1] is not fns[n + 3]  # each model's lead-in and timed iteration
    assert kw["every"][-4:] == [4] * 4
    rows = {r["model"]: (r, smp) for row, smp in got for r in row.to_dict("records")}
    assert sorted(rows) == ["mlp", "mlp_too"] and all(r["method"] == "rotation" for r, _ in rows.values())
    r, smp = rows["mlp_too"]
    assert set(smp["key"]) == {"mlp_too/inference/b2"} and r["median_s"] > meas["median_s"].max()
    calls = layers[layers["model"] == "mlp_too"].groupby("config_id")["count"].sum()
    assert r["timed_s"] == pytest.approx(float((meas.set_index("config_id")["median_s"] * calls).sum()))


@pytest.mark.parametrize("cache", ["fresh", "rotation"])
def test_fresh_rotation_feeds_each_operator_its_producers_output(cache):
    """cache fresh: in each round a call reads the tensor its producer returned in that round (as in the model);
    cache rotation: its own synthesized inputs."""
    import torch

    from opcost.database import catalog
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    models = {"mlp": {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 16}, "input_shapes": [[8]]}}
    configs = catalog(extract(make_workload(load_model("mlp", models["mlp"]), 2, "inference")))
    fast = TimingSettings(max_seconds=0.05, warmup_s=0.0, min_samples=20, max_samples=20, target_rel_ci=1e-9)
    seen = []  # (in_features, out_features, input pointer, output pointer) per Linear call

    def hook(m, args, out):
        if isinstance(m, torch.nn.Linear):
            seen.append((m.in_features, m.out_features, args[0].data_ptr(), out.data_ptr()))

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        meas, _ = profile_configs(configs, models, "cpu", "float32", ProfileSettings(fast, cache=cache))
    finally:
        handle.remove()
    assert (meas["status"] == "ok").all()
    # fc1 (8 -> 16) writes h; `h += fc2(...)` returns h; out (16 -> 1) reads it: the same memory in a model
    outs = [s for s in seen if s[:2] == (16, 1)][-10:]  # the last 10 rounds (each calls fc1, then out)
    fc1 = [s for s in seen if s[:2] == (8, 16)][-10:]
    assert len(fc1) == len(outs) == 10
    same = [f[3] == o[2] for f, o in zip(fc1, outs)]
    assert all(same) if cache == "fresh" else not any(same)


def test_the_driver_version_is_read_from_either_kernel_module_banner():
    proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
    open_module = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                   "(dvs-builder@U22-I3-AE18-23-3)  Thu Jul 24 20:37:01 UTC 2025")
    assert driver_version_of(proprietary) == "535.104.05" and driver_version_of(open_module) == "580.159.04"
    assert driver_version_of("no version here") is None
