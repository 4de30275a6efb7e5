"""The placement advisor (opcost.analysis.advise) on real Parquet databases: synthetic ones written here (a small
model really extracted, its per-placement costs chosen), and the real H200 fixture (tests/data/h200)."""
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from opcost import io, tables
from opcost.analysis import advise, placement_problem
from opcost.database import DB_TABLES, read_db
from opcost.errors import OpcostError
from opcost.model.extract import extract
from opcost.model.sources import load_model
from opcost.model.tensors import specs
from opcost.model.workload import make_workload

H200 = Path(__file__).parent / "data" / "h200"
CHAIN = {"model": "tests.test_advise:make_chain", "input_shapes": [[8]]}


class Chain(nn.Module):
    """Six parameter groups of different sizes; `c` and `d` are the same configuration (interchangeable groups)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 32), nn.Linear(32, 16)
        self.c, self.d = nn.Linear(16, 16), nn.Linear(16, 16)
        self.norm, self.e = nn.LayerNorm(16), nn.Linear(16, 64)

    def forward(self, x):
        return self.e(self.norm(self.d(torch.relu(self.c(self.b(self.a(x)))))))


def make_chain() -> nn.Module:
    return Chain()


def _row(layer, placement, seconds, device, baseline=False):
    return {**dict.fromkeys(tables.MEASUREMENTS.names), "config_id": layer.config_id, "op_type": layer.op_type,
            "mode": layer.mode, "source": "isolated", "phase": "forward", "status": "ok", "device": device,
            "placement": placement, "threads": 1, "host": "synth", "placement_ok": True, "baseline": baseline,
            "cache": "warm", "median_s": seconds, "trimmed_mean_s": seconds, "n": 10}


def synthetic_db(path: Path, device: str = "cpu", slow_tier: bool = True, seed: int = 0) -> dict:
    """A database of the Chain model at batch 4 on tiers `fast` and `slow`: each configuration's all-fast time, and
    with a slow tier, its time with the activations, the weights, or both there (chosen slowdowns, not additive)."""
    layers = extract(make_workload(load_model("chain", CHAIN), 4, "inference"))
    rng = np.random.default_rng(seed)
    rows, truth = [], {}
    for r in layers.itertuples():
        n_in, has_w = len(specs(r.inputs)), r.op_type in ("Linear", "LayerNorm")
        t = float(rng.uniform(5e-6, 5e-5))

        def where(i, w, o):
            return ";".join(([f"in:{','.join([i] * n_in)}"] if n_in else []) + ([f"w:{w}"] if has_w else [])
                            + [f"out:{o}"])

        rows.append(_row(r, where("fast", "fast", "fast"), t, device, baseline=True))
        sa, sw = float(rng.uniform(1.2, 3.0)), float(rng.uniform(1.05, 2.0)) if has_w else 1.0
        s_all = max(sa, sw) + float(rng.uniform(0, 2)) * (min(sa, sw) - 1)  # sub- to super-additive
        truth[r.config_id] = {"t": t, "count": int(r.count), "sa": sa, "sw": sw, "all": s_all if has_w else sa}
        if slow_tier:
            rows.append(_row(r, where("slow", "fast", "slow"), t * sa, device))
            if has_w:
                rows += [_row(r, where("fast", "slow", "fast"), t * sw, device),
                         _row(r, where("slow", "slow", "slow"), t * s_all, device)]
    path.mkdir(parents=True, exist_ok=True)
    io.write_parquet(tables.frame(tables.MEASUREMENTS, rows), path / "measurements.parquet", tables.MEASUREMENTS)
    io.write_parquet(layers, path / "layers.parquet", tables.LAYERS)
    return truth


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    path = tmp_path_factory.mktemp("chain_db")
    truth = synthetic_db(path)
    problem = advise.for_workload(read_db(path), ("chain", 4, "inference"), CHAIN,
                                  settings=placement_problem.AdviseSettings())
    return problem, truth, path


def brute_force(problem: placement_problem.Problem, budget: int) -> float:
    best = np.inf
    for bits in itertools.product([False, True], repeat=len(problem.groups)):
        x = np.array(bits)
        if problem.bytes[~x].sum() <= budget:
            best = min(best, placement_problem.evaluate(problem, x).predicted_s)
    return best


def test_the_groups_and_costs_are_the_models_and_the_databases(chain):
    problem, truth, _ = chain
    names = [g.name for g in problem.groups]
    assert names == [placement_problem.ACTIVATIONS, "a", "b", "c", "d", "norm", "e"]  # in call order
    a = problem.groups[1]
    assert a.tensors == ("a.weight", "a.bias") and a.bytes == (8 * 32 + 32) * 4
    fast = placement_problem.evaluate(problem, np.zeros(7, dtype=bool))
    assert fast.slowdown == (1.0, 1.0, 1.0) and fast.estimated_share == 0  # every cost measured
    # each scenario adds, per configuration, count x time x (its measured slowdown - 1)
    for slow, key in ((np.array([1, 0, 0, 0, 0, 0, 0]), "sa"), (np.array([0, 1, 1, 1, 1, 1, 1]), "sw"),
                      (np.ones(7), "all")):
        extra = sum(v["count"] * v["t"] * (v[key] - 1) for v in truth.values())
        got = placement_problem.evaluate(problem, slow.astype(bool)).predicted_s
        assert got - fast.predicted_s == pytest.approx(extra)
    assert problem.inter[0].any()  # the measured `all` placements are not the sum of the other two
    assert (problem.lin[:, 3] == problem.lin[:, 4]).all() and problem.bytes[3] == problem.bytes[4]  # c, d: one class


def test_the_integer_program_finds_the_brute_force_optimum(chain):
    problem, _, _ = chain
    for share in np.linspace(0, 1, 21):
        budget = placement_problem.budget_bytes(float(share), problem)
        best = brute_force(problem, budget)
        for merge in (True, False):
            plan = placement_problem.optimise(problem, budget, placement_problem.AdviseSettings(merge=merge, gap=0.0))
            assert plan.fast_bytes <= budget
            assert plan.predicted_s == pytest.approx(best, rel=1e-9), (share, merge)
        for other in (placement_problem.greedy(problem, budget), placement_problem.first_touch(problem, budget)):
            assert other.fast_bytes <= budget and other.predicted_s >= best * (1 - 1e-12)


def test_a_full_budget_is_all_fast_and_none_all_slow(chain):
    problem, _, _ = chain
    full = placement_problem.optimise(problem, placement_problem.budget_bytes("100%", problem))
    assert not full.slow.any() and full.slowdown[0] == 1.0 and full.slow_bytes == 0
    assert not placement_problem.optimise(problem, problem.footprint * 2).slow.any()
    zero = placement_problem.optimise(problem, placement_problem.budget_bytes("0", problem))
    assert zero.slow.all() and zero.fast_bytes == 0
    assert set(zero.as_dict(problem)["plan"].values()) == {"slow"}
    assert zero.predicted_s == pytest.approx(placement_problem.evaluate(problem, np.ones(7, dtype=bool)).predicted_s)


@pytest.mark.parametrize("text, expected", [("2KiB", 2048), ("1.5kB", 1500), ("4096", 4096), ("1e3", 1000)])
def test_budgets_are_sizes_or_shares(chain, text, expected):
    problem, _, _ = chain
    assert placement_problem.budget_bytes(text, problem) == expected
    half = round(problem.footprint / 2)
    assert placement_problem.budget_bytes("50%", problem) == placement_problem.budget_bytes(0.5, problem) == half
    with pytest.raises(OpcostError, match=r"^--budget 2 apples: expected a size"):
        placement_problem.budget_bytes("2 apples", problem)
    # a config's 0.5 is half the footprint; on the command line it was half a byte, rounded to an all-slow plan
    for text, share in (("0.5", "50%"), ("1", "100%")):
        with pytest.raises(OpcostError, match=rf"^--budget {text}: a number without a unit is bytes here.*{share}"):
            placement_problem.budget_bytes(text, problem)
    assert placement_problem.budget_bytes("1B", problem) == 1


def test_the_plan_file_round_trips_and_reapplies(chain, tmp_path):
    problem, _, _ = chain
    doc = advise.advise(problem, [0.25, 0.5, "1KiB"])
    advise.write_advice(doc, tmp_path / "plan.yaml")
    back = advise.read_advice(tmp_path / "plan.yaml")
    assert back == doc
    for entry in back["budgets"]:
        for method in placement_problem.METHODS:
            got = entry[method]
            mask = placement_problem.slow_mask(problem, got["plan"])  # what a later run applies: tensor -> tier
            assert placement_problem.evaluate(problem, mask).predicted_s == pytest.approx(got["predicted_s"], rel=1e-12)
            assert sum(got["bytes"].values()) == problem.footprint and got["bytes"]["fast"] <= entry["budget_bytes"]
    assert [p["share"] for p in back["curve"]] == pytest.approx(np.linspace(0, 1, 11))


def test_an_unreachable_budget_is_one_line(tmp_path, capsys):
    """On a GPU the activations stay in device memory: a budget below them cannot be met."""
    synthetic_db(tmp_path / "db", device="cuda")
    problem = advise.for_workload(read_db(tmp_path / "db"), ("chain", 4, "inference"), CHAIN)
    assert problem.groups[0].pinned and problem.must_stay_fast == problem.groups[0].bytes > 0
    with pytest.raises(OpcostError) as err:
        placement_problem.budget_bytes("0", problem)
    assert "\n" not in str(err.value) and str(err.value).startswith("--budget 0: 0 B is below the ")
    assert "must stay on the fast tier fast" in str(err.value)
    # 0%: every parameter on the slow tier
    assert placement_problem.optimise(problem, problem.must_stay_fast).slow[1:].all()
    from opcost.cli import main

    capsys.readouterr()
    assert main(["advise", "chain", "--batch", "4", "--budget", "10B", "--db",
                 str(tmp_path / "db"), "--config", str(_config(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("opcost: --budget 10B: 10 B is below")


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"models": {"chain": CHAIN}}))
    return path


def test_a_database_without_a_slower_tier_says_so(tmp_path):
    synthetic_db(tmp_path / "db", slow_tier=False)
    with pytest.raises(OpcostError, match="^database: holds no verified placement on a slower memory tier"):
        advise.for_workload(read_db(tmp_path / "db"), ("chain", 4, "inference"), CHAIN)


@pytest.fixture(scope="module")
def h200_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("h200_db")
    for name in ("measurements", "layers"):
        table = DB_TABLES[name]
        io.write_parquet(io.read_parquet(H200 / f"{name}.parquet", table), path / f"{name}.parquet", table)
    return path


def test_resnet18_on_the_h200_between_device_and_host_memory(h200_db):
    """Parameters placed per module, activations in device memory; the predicted slowdown falls as the budget
    grows, and the integer program is never worse than greedy or first touch."""
    settings = placement_problem.AdviseSettings(tiers=("hbm", "host"), db_dir=h200_db)
    problem = advise.for_workload(read_db(h200_db), ("resnet18", 8, "inference"), {}, settings=settings)
    assert problem.groups[0].pinned and len(problem.groups) == 42  # 20 convolutions, 20 batch norms, fc
    assert problem.footprint - problem.must_stay_fast == sum(
        p.numel() * 4 for p in load_model("resnet18", {}).module.state_dict().values() if p.dtype == torch.float32) \
        + 20 * 8  # the batch norms' int64 counters
    doc = advise.advise(problem, [0.25, 0.5, 0.75], settings, curve_points=21)
    methods = placement_problem.METHODS
    curve = pd.DataFrame([{m: p[m]["predicted_slowdown"] for m in methods} | {"budget": p["budget_bytes"]}
                          for p in doc["curve"]])
    assert curve["budget"].is_monotonic_increasing
    assert (np.diff(curve["optimiser"]) <= 1e-12).all()  # more fast memory never predicts a slower iteration
    assert (curve["optimiser"] <= curve["greedy"] + 1e-12).all()
    assert (curve["optimiser"] <= curve["first_touch"] + 1e-12).all()
    assert curve["optimiser"].iloc[-1] == 1.0 and curve["optimiser"].iloc[0] == pytest.approx(doc["all_slow_slowdown"])
    assert (curve["optimiser"] < curve["greedy"] - 1e-3).any()  # and better somewhere
    for entry in doc["budgets"]:
        opt = entry["optimiser"]
        assert opt["low_slowdown"] <= opt["predicted_slowdown"] <= opt["high_slowdown"]
        assert 0 < opt["estimated_share"] < 1  # parameters on the host: priced per byte, estimated
        assert opt["plan"][placement_problem.ACTIVATIONS] == "hbm"


def test_opcost_advise_json_on_the_h200(h200_db, capsys):
    from opcost.cli import main

    assert main(["advise", "resnet18", "--batch", "8", "--budget", "60MiB", "--tiers", "hbm,host", "--db",
                 str(h200_db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget_bytes"] == 60 * 2 ** 20 and out["bytes"]["hbm"] <= out["budget_bytes"]
    assert out["low_slowdown"] <= out["predicted_slowdown"] <= out["high_slowdown"]
    assert {"predicted_s", "estimated_share", "greedy", "first_touch"} <= set(out)
    assert out["plan"]["fc.weight"] in ("hbm", "host") and out["plan"][placement_problem.ACTIVATIONS] == "hbm"
    assert main(["advise", "resnet18", "--batch", "8", "--budget", "60MiB", "--db", str(h200_db)]) == 1
    assert "choose one with --tiers hbm,host" in capsys.readouterr().err


def test_the_stage_writes_a_plan_file_per_workload_and_the_figure(tmp_path):
    """Two workloads: one with a slower tier in the database, one whose database has a single tier (its plan file
    says why, once in the log); the figure draws what there is."""
    from opcost import stages
    from opcost.config import validate

    cfg = validate({"models": {"chain": CHAIN}, "placement": {"tiers": {"fast": {"numa": 0}, "slow": {"numa": 1}}},
                    "advise": {"budgets": [0.5, "1KiB", "1B"]}})
    synthetic_db(tmp_path / "db")
    paths = {name: tmp_path / "db" / f"{name}.parquet" for name in ("layers", "measurements")}
    out = {("chain", "inference", 4): tmp_path / "advise" / "chain" / "inference_b4.yaml"}
    docs = stages.advise(cfg, paths, out, tmp_path / "advise" / "advise.png")
    doc = advise.read_advice(out[("chain", "inference", 4)])
    assert doc == docs[0] and doc["fast"] == "fast" and doc["slow"] == "slow" and "skipped" not in doc
    assert doc["tiers"] == {"fast": {"numa": 0}, "slow": {"numa": 1}}  # what a later run binds the plan to
    assert [b["budget"] for b in doc["budgets"]] == [0.5, "1KiB", "1B"]
    assert doc["budgets"][1]["optimiser"]["bytes"]["fast"] <= 1024
    assert set(doc["budgets"][2]["optimiser"]["plan"].values()) == {"slow"}  # 1 byte: nothing fits
    assert (tmp_path / "advise" / "advise.png").stat().st_size > 0
    synthetic_db(tmp_path / "one", slow_tier=False)
    paths = {name: tmp_path / "one" / f"{name}.parquet" for name in ("layers", "measurements")}
    docs = stages.advise(cfg, paths, out, tmp_path / "advise" / "advise.png")
    assert docs[0]["skipped"].startswith("database: holds no verified placement on a slower memory tier")
    assert advise.read_advice(out[("chain", "inference", 4)]) == docs[0] and not docs[0]["budgets"]


def test_a_training_workload_on_the_h200_prices_its_backward_too(h200_db):
    """tiny_dlrm training: embedding tables read a few rows forward but get a dense gradient backward."""
    settings = placement_problem.AdviseSettings(tiers=("hbm", "host"), db_dir=h200_db)
    problem = advise.for_workload(read_db(h200_db), ("tiny_dlrm", 8, "training"), {}, settings=settings)
    table = next(g for g in problem.groups if g.name == "embeddings.0")
    assert table.bytes == 2 * 10000 * 32 * 4  # the table and its gradient, together
    doc = advise.advise(problem, [], settings, curve_points=11)
    opt = [p["optimiser"]["predicted_slowdown"] for p in doc["curve"]]
    assert (np.diff(opt) <= 1e-12).all() and opt[0] > 1.1 and opt[-1] == 1.0
    for p in doc["curve"]:
        assert p["optimiser"]["predicted_s"] <= min(p["greedy"]["predicted_s"], p["first_touch"]["predicted_s"]) \
            * (1 + 1e-12)
