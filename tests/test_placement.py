"""Memory placement: discovery, the placement plan, tensors bound to NUMA node 0 and checked, profiling per placement.

This machine has one NUMA node: a second CPU tier is exercised by giving node 0 two tier names; a real second node
(PMEM/CXL) and the GPU tiers cannot be exercised here and their tests say so when skipped.
"""
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from opcost.config import validate
from opcost.database import catalog
from opcost.errors import OpcostError
from opcost.measure.placement import Placement, Placer, Settings, Tier, discover, page_nodes, plan, usable_tiers
from opcost.measure.profile import ProfileSettings, profile_configs
from opcost.measure.timing import TimingSettings
from opcost.model.extract import extract
from opcost.model.replay import ModelCache, build
from opcost.model.sources import load_model
from opcost.model.workload import make_workload

FAST = TimingSettings(max_seconds=0.02, warmup_s=0.0, min_samples=3, min_sample_s=0.0001)
TWO_NAMES_NODE0 = {"tiers": {"dram": {"numa": 0}, "near": {"numa": 0}}}
MLP = {"mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}}
HOST = discover()
NODES = [n["node"] for n in HOST["numa_nodes"]]


def test_discovery_reads_a_sysfs_tree(tmp_path):
    for node, cpus in ((0, "0-3,8"), (1, "")):  # node 1: a CPU-less node, as PMEM in KMEM DAX mode or CXL
        d = tmp_path / f"node{node}"
        d.mkdir()
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {node} MemTotal:       {1024 * (node + 1)} kB\n")
    found = discover(tmp_path)
    assert [(n["node"], n["cpus"], n["mem_kb"], n["cpu_less"]) for n in found["numa_nodes"]] == [
        (0, [0, 1, 2, 3, 8], 1024, False), (1, [], 2048, True)]


def test_discovery_of_this_machine():
    assert 0 in NODES  # every Linux machine with NUMA support shows node0
    assert HOST["numa_nodes"][0]["cpus"]  # node 0 has this machine's CPUs


def test_plan_orders_all_fast_first_and_respects_the_cap():
    p = plan(2, True, ["dram", "pmem"], cap=100)
    assert str(p[0]) == "in:dram,dram;w:dram;out:dram"
    assert str(p[1]) == "in:pmem,pmem;w:dram;out:pmem"  # parameters held on the fast tier (AutoTM)
    assert len(p) == 2 ** 3 and len({str(x) for x in p}) == 8  # the whole product over 2 inputs + output
    assert len(plan(2, True, ["dram", "pmem"], params="vary", cap=100)) == 2 ** 4
    assert len(plan(40, False, ["a", "b", "c"], cap=6)) == 6  # never enumerates 3**41 placements
    assert all(Placement.parse(str(x)) == x for x in p)


def test_a_missing_tier_is_skipped_or_an_error_naming_it():
    absent = max(NODES) + 1
    settings = Settings.from_config({"tiers": {"dram": {"numa": 0}, "pmem": {"numa": absent}}})
    ok, skipped = usable_tiers(settings, "cpu")
    assert [t.name for t in ok] == ["dram"] and f"NUMA node {absent} not present" in skipped["pmem"]
    strict = Settings.from_config({"tiers": {"dram": {"numa": 0}, "pmem": {"numa": absent}}, "on_missing": "strict"})
    with pytest.raises(OpcostError, match=r"^config: placement.tiers.pmem: NUMA node \d+ not present"):
        usable_tiers(strict, "cpu")
    gpu = Settings.from_config({"tiers": {"hbm": {"cuda": "device"}}})
    if not torch.cuda.is_available():
        assert "no CUDA device" in usable_tiers(gpu, "cuda")[1]["hbm"]
    assert "GPU tiers need a cuda device" in usable_tiers(gpu, "cpu")[1]["hbm"]


def test_a_placed_tensor_lives_on_node0_with_its_values_and_layout():
    placer = Placer([Tier("dram", "numa", 0)], "cpu")
    src = torch.randn(64, 300).t()  # transposed: strides are reproduced, not just values
    src.requires_grad_(True)
    t = placer.place(src, "dram")
    assert torch.equal(t, src) and t.stride() == src.stride() and t.requires_grad and t.is_leaf
    assert t.data_ptr() != src.data_ptr()
    assert set(page_nodes(t.data_ptr(), t.untyped_storage().nbytes())) == {0}
    assert placer.where(t) == "dram"
    assert placer.where(torch.empty(1 << 16).fill_(1)) == "dram"  # the heap is on node 0 too on this machine


@pytest.mark.skipif(len(NODES) < 2, reason="one NUMA node on this machine: a second tier (PMEM/CXL node) cannot "
                                           "be exercised here")
def test_a_tensor_placed_on_the_second_node_is_found_there():
    placer = Placer([Tier("near", "numa", NODES[0]), Tier("far", "numa", NODES[1])], "cpu")
    t = placer.place(torch.randn(1 << 16), "far")
    assert placer.where(t) == "far"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU tiers verified on GPU hosts only")
def test_gpu_tiers_are_what_cuda_reports():
    placer = Placer([Tier("hbm", "cuda", "device"), Tier("host", "cuda", "host"),
                     Tier("managed", "cuda", "managed")], "cuda")
    src = torch.randn(1000, 10, device="cuda")
    for name in ("hbm", "host", "managed"):
        t = placer.place(src, name)
        assert t.device.type == "cuda" and torch.equal(t, src) and placer.where(t) == name
        assert torch.equal(t @ t.t(), src @ src.t())  # kernels read the tier directly


def _mlp_configs():
    return catalog(extract(make_workload(load_model("mlp", MLP["mlp"]), 4, "inference")))


def test_every_configuration_is_measured_under_each_placement_and_verified():
    configs = _mlp_configs()
    cfg = validate({"models": MLP, "placement": TWO_NAMES_NODE0})
    meas, samples = profile_configs(configs, cfg["models"], "cpu", "float32",
                                    ProfileSettings(FAST, placement=Settings.from_config(cfg["placement"])))
    assert (meas["status"] == "ok").all(), meas["status"].tolist()
    # the default cache state: each configuration's cost in rotation, placements back-to-back over cold pools
    rotated = meas[meas["placement"] == "default"]
    assert set(rotated["config_id"]) == set(configs["config_id"]) and (rotated["cache"] == "fresh").all()
    assert rotated["baseline"].all() and rotated["placement_verified"].isna().all()
    meas = meas[meas["placement"] != "default"]
    assert meas["cache"].str.startswith("cold").all()
    linear = meas[meas["op_type"] == "Linear"]
    for cid, g in linear.groupby("config_id"):
        # one input, fixed parameters, one output over two tiers: 4 placements, exactly one all-fast reference
        assert sorted(g["placement"]) == sorted(["in:dram;w:dram;out:dram", "in:near;w:dram;out:near",
                                                 "in:near;w:dram;out:dram", "in:dram;w:dram;out:near"])
        assert g["baseline"].sum() == 1 and g.loc[g["baseline"], "placement"].item() == "in:dram;w:dram;out:dram"
    # both names map to node 0: every tensor is verified on the requested tier (it is found under both names)
    assert meas["placement_ok"].all(), meas[["placement", "placement_verified"]].to_string()
    assert meas["placement_verified"].str.contains("dram|near", regex=False).all()
    assert set(samples["placement"]) == set(meas["placement"]) | {"default"}
    keys = samples.groupby(["key", "placement", "phase"]).size()
    assert len(keys) == len(meas) + len(rotated)  # raw samples kept per placement


def test_parameters_are_placed_and_put_back():
    configs = _mlp_configs()
    row = configs[configs["op_type"] == "Linear"].iloc[0].to_dict()
    models = ModelCache(MLP, "cpu", "float32")
    module = models.get("mlp").module.get_submodule(json.loads(row["replay"])["path"])
    before = [p.data_ptr() for p in module.parameters()]
    placer = Placer([Tier("dram", "numa", 0), Tier("near", "numa", 0)], "cpu")
    rep = build(row, models, "cpu", Placement.parse("in:near;w:near;out:dram"), placer)
    placed = [p.data_ptr() for p in module.parameters()]
    assert all(a != b for a, b in zip(before, placed))
    assert all(placer.where(p) == "dram|near" for p in module.parameters())
    with rep.context():
        assert rep.outputs()[0].shape[0] == 4
    rep.close()
    assert [p.data_ptr() for p in module.parameters()] == before


def test_a_mismatch_is_flagged_not_accepted(monkeypatch):
    configs = _mlp_configs()
    cfg = validate({"models": MLP, "placement": {"tiers": {"dram": {"numa": 0}, "other": {"numa": 0}}}})
    # the OS boundary lies: pages of every tensor are reported on a node no tier names
    monkeypatch.setattr("opcost.measure.placement.page_nodes", lambda addr, length, max_pages=64: [7])
    meas, _ = profile_configs(configs[configs["op_type"] == "Linear"], cfg["models"], "cpu", "float32",
                              ProfileSettings(FAST, placement=Settings.from_config(cfg["placement"])))
    assert (meas["status"] == "ok").all()
    assert not meas["placement_ok"].any()
    assert meas["placement_verified"].str.contains("numa:7").all()


def test_default_placement_when_no_tiers():
    configs = _mlp_configs()
    meas, _ = profile_configs(configs, validate({"models": MLP})["models"], "cpu", "float32", ProfileSettings(FAST))
    assert set(meas["placement"]) == {"default"} and meas["baseline"].all()
    assert meas["placement_ok"].isna().all()
    assert isinstance(meas, pd.DataFrame)


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="get_mempolicy syscall number: x86_64 only")
def test_output_binding_is_returned_to_the_default_policy():
    import ctypes

    placer = Placer([Tier("dram", "numa", 0)], "cpu")
    out = torch.empty(1 << 16).fill_(1.0)
    placer.bind_output(out, "dram")
    libc = ctypes.CDLL(None, use_errno=True)

    def policy(addr):  # get_mempolicy(MPOL_F_ADDR): the policy of the mapping at addr
        mode, mask = ctypes.c_int(-1), ctypes.c_ulong(0)
        assert libc.syscall(239, ctypes.byref(mode), ctypes.byref(mask), ctypes.c_ulong(64), ctypes.c_void_p(addr),
                            2) == 0
        return mode.value

    assert policy(out.data_ptr()) == 2  # MPOL_BIND while the configuration is measured
    placer.unbind_outputs()
    assert policy(out.data_ptr()) == 0  # MPOL_DEFAULT for whatever the allocator puts there next


def test_a_failing_placement_keeps_the_others(monkeypatch):
    configs = _mlp_configs()
    cfg = validate({"models": MLP, "placement": TWO_NAMES_NODE0})
    real_place = Placer.place

    def place(self, t, tier_name):
        if tier_name == "near":
            raise OSError(12, "Cannot allocate memory")  # e.g. the slow node is full
        return real_place(self, t, tier_name)

    monkeypatch.setattr(Placer, "place", place)
    meas, _ = profile_configs(configs[configs["op_type"] == "Linear"], cfg["models"], "cpu", "float32",
                              ProfileSettings(FAST, placement=Settings.from_config(cfg["placement"])))
    base = meas[meas["baseline"]]
    assert len(base) and (base["status"] == "ok").all() and base["placement_ok"].all()
    moved_in = meas[meas["placement"].str.startswith("in:near")]  # copying an input onto `near` fails
    assert len(moved_in) and moved_in["status"].str.startswith("failed: OSError").all()
    assert moved_in["median_s"].isna().all()
    out_only = meas[meas["placement"] == "in:dram;w:dram;out:near"]  # outputs are bound, not copied: measured
    assert len(out_only) and (out_only["status"] == "ok").all()


def test_the_whole_model_on_gpu_tiers_from_a_real_h200_database():
    """tests/data/h200: the isolated measurements and workloads of a real H200 run (2026-11-27, `gpu_check.sh`),
    inputs placed in device, pinned host and managed memory, outputs in device memory."""
    from opcost.analysis.predict import costed_layers
    from opcost.analysis.tiers import whole_model

    data = Path(__file__).parent / "data" / "h200"
    meas, layers = pd.read_parquet(data / "measurements.parquet"), pd.read_parquet(data / "layers.parquet")
    placed = whole_model(layers, meas, "cuda")
    assert set(placed["scenario"]) == {"activations"}  # parameters fixed on the device: the activations moved
    placed = placed.set_index(["model", "mode", "tier"])
    workloads = set(zip(layers["model"], layers["mode"]))
    assert set(placed.index) == {(m, mo, t) for m, mo in workloads for t in ("host", "managed")}
    assert set(placed["placement"]) == {"in:host out:hbm", "in:managed out:hbm"}  # the GPU allocator keeps outputs
    assert (placed["measured_share"] == 1).all()  # backward slowdowns too, verified by their forward rows
    costed = costed_layers(layers, meas, "cuda")
    for (model, mode, _), r in placed.iterrows():
        assert r["baseline_s"] == pytest.approx(costed.loc[(costed["model"] == model) & (costed["mode"] == mode),
                                                           "total_s"].sum(), rel=1e-9)
    # resnet18's convolutions read their activations over the interconnect: several times slower, as measured
    assert placed.loc[("resnet18", "inference", "host"), "slowdown"] > 2
    assert placed.loc[("resnet18", "inference", "host"), "predicted_s"] > placed.loc[
        ("resnet18", "inference", "managed"), "predicted_s"]


def test_a_process_bound_to_a_tier_keeps_its_threads_memory_there(tmp_path):
    """The e2e_tier job's binding: the process and the torch threads it starts afterwards allocate on the node."""
    import subprocess
    import sys

    from opcost.measure.numa import bind_to_tier

    script = """
import ctypes, sys
from opcost.measure.numa import bind_to_tier
assert bind_to_tier({"tiers": {"dram": {"numa": 0}, "far": {"numa": 0}}}, "far") is None
import torch
from opcost.measure.placement import page_nodes
torch.set_num_threads(2)
x = torch.randn(1 << 20) @ torch.ones(1 << 20, 1)  # threads started after the binding
y = torch.empty(1 << 22).fill_(1.0)  # pages first touched by the intra-op threads
libc = ctypes.CDLL(None, use_errno=True)
mode, mask = ctypes.c_int(-1), ctypes.c_ulong(0)
assert libc.syscall(239, ctypes.byref(mode), ctypes.byref(mask), ctypes.c_ulong(64), None, 0) == 0
print(mode.value, sorted(set(page_nodes(y.data_ptr(), y.numel() * 4))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "2" and out.stdout.strip().endswith("[0]")  # MPOL_BIND, every page on node 0
    # a tier this host lacks, or one that is not a NUMA node, is not bound, and says why in one line
    fake = tmp_path / "node"
    (fake / "node0").mkdir(parents=True)
    assert "NUMA node 1 not present" in bind_to_tier({"tiers": {"far": {"numa": 1}}}, "far", fake)
    assert "not a NUMA tier" in bind_to_tier({"tiers": {"host": {"cuda": "host"}}}, "host", fake)


def test_with_parameters_placed_the_whole_model_has_its_weights_and_all_scenarios():
    """placement.params: vary, 4 placements per configuration: a Linear layer is measured all on `near` and with
    only its weights there; relu has no weights. Each scenario adds up its own placements' slowdowns."""
    from opcost.analysis.predict import costed_layers
    from opcost.analysis.tiers import scenarios, whole_model

    wl = make_workload(load_model("mlp", MLP["mlp"]), 4, "inference")
    layers = extract(wl)
    cfg = validate({"models": MLP, "placement": {**TWO_NAMES_NODE0, "params": "vary", "max_per_config": 4}})
    meas, _ = profile_configs(catalog(layers), cfg["models"], "cpu", "float32",
                              ProfileSettings(FAST, placement=Settings.from_config(cfg["placement"])))
    assert (meas["status"] == "ok").all() and meas["placement_ok"].dropna().all()
    got = scenarios(meas).set_index(["config_id", "scenario"])
    linear = layers.loc[layers["op_type"] == "Linear", "config_id"].iloc[0]
    relu = layers.loc[layers["op_type"] != "Linear", "config_id"].iloc[0]
    placed = meas[meas["config_id"] == linear].set_index("placement")["median_s"]
    fast = placed["in:dram;w:dram;out:dram"]
    assert got.loc[(linear, "all"), "slowdown"] == pytest.approx(placed["in:near;w:near;out:near"] / fast)
    assert got.loc[(linear, "weights"), "slowdown"] == pytest.approx(placed["in:dram;w:near;out:dram"] / fast)
    assert (linear, "activations") not in got.index  # in:near;w:dram;out:near was beyond max_per_config
    assert got.loc[(relu, "all"), "slowdown"] == got.loc[(relu, "activations"), "slowdown"]  # nothing else to move
    rows = whole_model(layers, meas, "cpu").set_index("scenario")
    assert set(rows.index) == {"activations", "weights", "all"}
    assert rows.loc["weights", "measured_share"] == 1 and rows.loc["all", "measured_share"] == 1
    assert rows.loc["activations", "measured_share"] < 1  # the Linear layers take a median of the others
    # weights on `near`: each Linear's cost x its own slowdown; relu and the other weightless calls unchanged
    costed = costed_layers(layers, meas, "cpu")
    want = 0.0
    for cid, total in zip(costed["config_id"], costed["total_s"]):
        key = (cid, "weights")
        want += total * (got.loc[key, "slowdown"] if key in got.index else 1.0)
    assert rows.loc["weights", "predicted_s"] == pytest.approx(want, rel=1e-9)
