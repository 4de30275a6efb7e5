"""Simultaneous placement profiling: the greedy schedule, co-placed rounds in a real model, comparison with isolated.

This machine has one NUMA node: node 0 gets two tier names, so placements are made and verified for real though
their timings match.
"""
import time

import pandas as pd
import pytest
import torch
from torch import nn

from opcost import io, stages, tables
from opcost.config import validate
from opcost.database import catalog
from opcost.measure.coplace import compare, is_baseline, layers_of, profile_coplace, schedule
from opcost.measure.placement import Placement, Settings, Tier, output_tier, plan
from opcost.measure.profile import ProfileSettings, profile_configs
from opcost.measure.timing import TimingSettings
from opcost.model.extract import extract
from opcost.model.sources import load_model
from opcost.model.workload import make_workload
from opcost.report import figures

FAST = TimingSettings(max_seconds=0.02, warmup_s=0.0, min_samples=3, min_sample_s=0.0001)
TWO_NAMES_NODE0 = {"tiers": {"dram": {"numa": 0}, "near": {"numa": 0}}, "max_per_config": 4}
CONVNET = {"convnet": {"model": "tests.test_coplace:small_convnet", "input_shapes": [[3, 16, 16]]}}


class SmallConvNet(nn.Module):
    """Conv/BN/in-place ReLU/pool/Linear; one ReLU module called at two positions, a functional flatten."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def small_convnet():
    return SmallConvNet()


def _neighbours_ok(rounds, fast, gap=2):
    for assign in rounds:
        off = sorted(i for i, p in assign.items() if not is_baseline(p, fast))
        if any(b - a < gap for a, b in zip(off, off[1:])):
            return False
    return True


def test_schedule_covers_everything_without_neighbours_off_the_fast_tier_together():
    tiers = ["dram", "near"]
    # a call sequence with layers of 0..3 inputs, with and without parameters
    shapes = [(1, True), (1, False), (1, True), (2, False), (1, False), (0, True), (3, True), (1, False)]
    placements = [plan(n, w, tiers, cap=8) for n, w in shapes]
    rounds = schedule(placements, "dram")
    assert _neighbours_ok(rounds, "dram")
    covered = [[r[i] for r in rounds if i in r] for i in range(len(placements))]
    assert all(sorted(map(str, c)) == sorted(map(str, ps)) for c, ps in zip(covered, placements))  # each once
    m = max(sum(not is_baseline(p, "dram") for p in ps) for ps in placements)
    # the guarantee: a layer waits only while a neighbour is served off the fast tier
    bound = max(len(placements[i]) + sum(len(placements[j]) - 1 for j in (i - 1, i + 1) if 0 <= j < len(placements))
                for i in range(len(placements)))
    assert m < len(rounds) <= bound <= 3 * m + 1
    assert len(rounds) < sum(map(len, placements))


def test_schedule_on_a_uniform_chain_alternates_and_gap_one_packs_everything():
    ps = plan(1, True, ["dram", "near"], cap=4)  # 1 baseline + 3 off the fast tier
    rounds = schedule([ps] * 9, "dram")
    assert len(rounds) == 2 * 3 and _neighbours_ok(rounds, "dram")
    assert len(schedule([ps] * 9, "dram", gap=1)) == len(ps)  # no restriction: one placement per layer per round
    wide = schedule([ps] * 9, "dram", gap=3)
    assert _neighbours_ok(wide, "dram", gap=3) and len(wide) <= 3 * 3 + 1


def test_schedule_keeps_one_parameter_tier_per_shared_module():
    ps = plan(1, True, ["dram", "near"], params="vary", cap=8)
    rounds = schedule([ps, ps, ps, ps], "dram", owners=["a", "b", "a", "b"])  # two modules, each called twice
    for assign in rounds:
        for owner in ("a", "b"):
            w = {assign[i].params for i in assign if ["a", "b", "a", "b"][i] == owner}
            assert len(w) <= 1
    assert all(sorted(str(r[i]) for r in rounds if i in r) == sorted(map(str, ps)) for i in range(4))


def _workload():
    return make_workload(load_model("convnet", CONVNET["convnet"]), 2, "inference")


def test_on_a_gpu_coplaced_outputs_stay_on_the_fast_tier_as_in_isolated_profiling():
    """GPU kernels allocate outputs through the device allocator: a placement asking for an output elsewhere could
    never be verified (on an H200, 14 of 21 co-placed calls asking for host outputs were found in device memory)."""
    tiers = [Tier("hbm", "cuda", "device"), Tier("host", "cuda", "host")]
    assert output_tier(tiers, "cuda") == "hbm" and output_tier(tiers, "cuda:1") == "hbm"
    assert output_tier([Tier("dram", "numa", 0), Tier("far", "numa", 1)], "cpu") is None
    layers = layers_of(_workload(), ["dram", "near"], Settings.from_config(TWO_NAMES_NODE0), out_tier="dram")
    placements = [p for la in layers if la.alias is None for p in la.placements]  # in-place ops write their input
    assert placements and {p.out for p in placements} == {"dram"}
    assert any(p.inputs and set(p.inputs) == {"near"} for p in placements)  # inputs still move


def test_coplace_measures_every_placement_of_every_layer_in_few_rounds_and_restores_parameters():
    wl = _workload()
    settings = Settings.from_config(TWO_NAMES_NODE0)
    module = wl.model.module
    before = [t.data_ptr() for t in list(module.parameters()) + list(module.buffers())]
    layers = layers_of(wl, ["dram", "near"], settings)
    assert [la.op_type for la in layers] == ["Conv2d", "BatchNorm2d", "ReLU", "Conv2d", "ReLU", "MaxPool2d", "Linear"]
    relu = [la for la in layers if la.op_type == "ReLU"]
    assert relu[0].module is relu[1].module and relu[0].alias == 0  # in place: output on the input's tier
    assert {str(p) for p in relu[0].placements} == {"in:dram;out:dram", "in:near;out:near"}

    t0 = time.perf_counter()
    meas, summary = profile_coplace(wl, FAST, "cpu", settings)
    t_coplace = time.perf_counter() - t0
    assert [t.data_ptr() for t in list(module.parameters()) + list(module.buffers())] == before
    assert list(meas.columns) == tables.MEASUREMENTS.names and (meas["source"] == "coplace").all()
    assert (meas["workload"] == "convnet/inference/b2").all() and (meas["status"] == "ok").all()
    expected = {(la.config_id, str(p)) for la in layers for p in la.placements}
    assert set(zip(meas["config_id"], meas["placement"])) == expected and len(meas) == len(expected)
    assert meas["placement_ok"].all(), meas[["placement", "placement_verified"]].to_string()
    assert meas["placement_verified"].str.contains("dram|near", regex=False).all()
    assert (meas["n"] >= FAST.min_samples).all() and (meas["median_s"] > 0).all()
    assert meas.groupby("config_id")["baseline"].sum().eq(1).all()
    assert summary["layers"] == len(layers) and summary["placements"] == len(expected)
    assert summary["layer_placements"] == sum(len(la.placements) for la in layers)
    assert summary["rounds"] < summary["layer_placements"] and summary["placement_mismatches"] == 0
    assert summary["wall_s"] > 0 and summary["isolated_estimate_s"] > 0

    # the same configurations profiled in isolation, placement by placement
    configs = catalog(extract(wl))
    configs = configs[configs["scope"] == "module"]
    t0 = time.perf_counter()
    iso, _ = profile_configs(configs, CONVNET, "cpu", "float32",
                             ProfileSettings(FAST, remeasure=0, placement=settings, cache="warm"))
    t_isolated = time.perf_counter() - t0
    print(f"co-placed {t_coplace:.2f} s in {summary['rounds']} rounds, isolated {t_isolated:.2f} s for {len(iso)} "
          f"(configuration, placement) pairs")
    assert set(zip(iso["config_id"], iso["placement"])) == set(zip(meas["config_id"], meas["placement"]))

    cmp = compare(meas, iso)
    assert len(cmp) == len(meas) and not cmp[["coplace_s", "isolated_s"]].isna().any().any()
    assert (cmp.loc[cmp["baseline"], ["slowdown_coplace", "slowdown_isolated"]] == 1.0).all().all()
    row = cmp.iloc[0]
    assert row["ratio"] == pytest.approx(row["coplace_s"] / row["isolated_s"])
    assert cmp["placement_ok"].all()


def test_compare_joins_per_configuration_and_placement():
    def rows(source, times):
        return tables.frame(tables.MEASUREMENTS, [
            {**dict.fromkeys(tables.MEASUREMENTS.names), "config_id": cid, "op_type": "Linear", "mode": "inference",
             "source": source, "phase": "forward", "status": "ok", "placement": plc,
             "baseline": plc == "in:dram;out:dram", "placement_ok": True, "median_s": s}
            for (cid, plc), s in times.items()])

    co = rows("coplace", {("a", "in:dram;out:dram"): 2.0, ("a", "in:near;out:near"): 3.0,
                          ("b", "in:dram;out:dram"): 1.0, ("c", "in:dram;out:dram"): 1.0})
    iso = rows("isolated", {("a", "in:dram;out:dram"): 1.0, ("a", "in:near;out:near"): 2.0,
                            ("b", "in:dram;out:dram"): 4.0, ("b", "in:near;out:near"): 8.0})
    cmp = compare(co, iso).set_index(["config_id", "placement"])
    assert list(cmp.index) == [("a", "in:dram;out:dram"), ("a", "in:near;out:near"), ("b", "in:dram;out:dram")]
    a = cmp.loc[("a", "in:near;out:near")]
    assert (a["coplace_s"], a["isolated_s"], a["ratio"]) == (3.0, 2.0, 1.5)
    assert (a["slowdown_coplace"], a["slowdown_isolated"], a["slowdown_ratio"]) == (1.5, 2.0, 0.75)
    assert cmp.loc[("b", "in:dram;out:dram"), "ratio"] == 0.25
    assert compare(co.iloc[:0], iso).empty


def test_figure_and_stage(tmp_path):
    cmp = pd.DataFrame({"config_id": ["a", "a"], "op_type": ["Conv2d", "Conv2d"],
                        "placement": ["in:dram;out:dram", "in:near;out:near"], "baseline": [True, False],
                        "slowdown_coplace": [1.0, 1.3], "slowdown_isolated": [1.0, 1.2]})
    figures.coplace_consistency(cmp, tmp_path / "c.png", speedup=3.5)
    figures.coplace_consistency(cmp.iloc[:0], tmp_path / "empty.png")
    assert (tmp_path / "c.png").stat().st_size > 0 and (tmp_path / "empty.png").stat().st_size > 0

    cfg = validate({"models": CONVNET, "placement": TWO_NAMES_NODE0, "threads": 1,
                    "insitu": {"timing": {"max_seconds": 0.01, "min_samples": 3, "warmup_s": 0.0}}})
    stages.coplace(cfg, "convnet", "inference", 1, tmp_path / "m.parquet", tmp_path / "s.json")
    summary = io.read_json(tmp_path / "s.json")
    meas = io.read_parquet(tmp_path / "m.parquet", tables.MEASUREMENTS)
    assert len(meas) == summary["placements"] and io.read_json(tmp_path / "s.json")["rounds"] == summary["rounds"]
    for mode, placement, why in (("training", TWO_NAMES_NODE0, "inference only"),
                                 ("inference", {"tiers": {"dram": {"numa": 0}}}, "needs two")):
        cfg = validate({"models": CONVNET, "placement": placement, "threads": 1})
        stages.coplace(cfg, "convnet", mode, 1, tmp_path / "skip.parquet", tmp_path / "skip.json")
        assert io.read_parquet(tmp_path / "skip.parquet", tables.MEASUREMENTS).empty
        assert why in io.read_json(tmp_path / "skip.json")["skipped"]


def test_placements_are_those_isolated_profiling_plans():
    wl = _workload()
    layers = layers_of(wl, ["dram", "near"], Settings.from_config({**TWO_NAMES_NODE0, "params": "vary"}))
    conv = layers[0]
    assert conv.n_inputs == 1 and conv.has_params
    assert conv.placements == plan(1, True, ["dram", "near"], "vary", 4)
    assert all(isinstance(p, Placement) for la in layers for p in la.placements)
