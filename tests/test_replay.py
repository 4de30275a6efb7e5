"""Every extracted configuration of small real models replays and times, in both modes."""
import json

import pytest
import torch

from opcost.config import validate
from opcost.database import catalog
from opcost.measure.profile import ProfileSettings, profile_configs
from opcost.measure.profiling import chunk_of
from opcost.measure.timing import TimingSettings
from opcost.model.extract import extract
from opcost.model.replay import (
    ModelCache,
    build,
    op_overload,
    python_binding,
    refresher,
)
from opcost.model.sources import load_model
from opcost.model.workload import make_workload

FAST = TimingSettings(max_seconds=0.02, warmup_s=0.0, min_samples=3, min_sample_s=0.0001)
MODELS = {"tiny_dlrm": {"kwargs": {"tables": 2, "rows": 50, "dim": 8}},
          "tiny_bert": {"kwargs": {"layers": 1, "seq_len": 8, "d_model": 16, "ff": 32, "heads": 2}},
          "mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}}


@pytest.fixture(scope="module")
def configs():
    layers = []
    for name, spec in MODELS.items():
        for mode in ("inference", "training"):
            layers.append(extract(make_workload(load_model(name, spec), 2, mode)))
    import pandas as pd

    return catalog(pd.concat(layers, ignore_index=True))


def test_every_configuration_replays_in_both_modes(configs):
    meas, samples = profile_configs(configs, validate({"models": MODELS})["models"], "cpu", "float32",
                                    ProfileSettings(FAST))
    failed = meas[meas["status"] != "ok"]
    assert failed.empty, failed[["op_type", "mode", "status"]].to_string()
    assert set(meas["mode"]) == {"inference", "training"}
    fwd = meas[meas["phase"] == "forward"]
    assert (fwd["median_s"] > 0).all()
    assert sorted(fwd["config_id"]) == sorted(configs["config_id"])  # every configuration has a forward row
    bwd = meas[meas["phase"] == "backward"]
    assert set(bwd["mode"]) == {"training"} and len(bwd) >= len(configs[configs["op_type"] == "Linear"]) // 2
    # backward rows are net of the engine call measured in their rotation (a view's backward may come out 0)
    assert (bwd["engine_s"] > 0).all() and (bwd["median_s"] >= 0).all() and (bwd["median_s"] > 0).any()
    assert set(samples["key"]) == set(meas["config_id"])


def test_training_replay_runs_backward(configs):
    row = configs[(configs["op_type"] == "Linear") & (configs["mode"] == "training")].iloc[0].to_dict()
    cache = ModelCache(validate({"models": MODELS})["models"], "cpu", "float32")
    rep = build(row, cache, "cpu")
    module = cache.get(json.loads(row["replay"])["model"]).module.get_submodule(json.loads(row["replay"])["path"])
    weight_grads = []
    hook = module.weight.register_hook(lambda g: weight_grads.append(g))
    with rep.context():
        phases = dict(rep.callables())
        assert list(phases) == ["forward", "backward"]
        phases["forward"]()
        assert not weight_grads  # forward alone computes no gradient
        phases["backward"]()
        phases["backward"]()  # repeatable on the retained graph
    hook.remove()
    assert len(weight_grads) == 2 and all(torch.isfinite(g).all() for g in weight_grads)
    # computed, not accumulated: neither the weight nor the replay's leaf inputs gain a .grad to add into
    assert module.weight.grad is None and all(t.grad is None for t in rep.inputs if isinstance(t, torch.Tensor))


def test_inplace_functional_op_replays_in_training(configs):
    inplace = configs[configs["op"].str.endswith("_.Tensor") & (configs["mode"] == "training")]
    assert len(inplace)  # the residual `+=` of tiny_bert's encoder or relu_ somewhere
    rep = build(inplace.iloc[0].to_dict(), ModelCache({}, "cpu", "float32"), "cpu")
    with rep.context():
        for _, fn in rep.callables():
            fn()
            fn()


def test_an_inplace_module_in_training_is_cloned_before_its_timed_call_not_inside_it():
    """Inside a model, ReLU(inplace=True) writes its producer's output in place; the replay's input is a leaf that
    requires grad, so each call needs a clone of it. The phase's prepare step (run untimed by the rotation) makes
    it: the call itself runs the in-place op alone. Without the step (a back-to-back block) the call clones."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    models = {"act": {"model": "tests.tiny_models:make_activations", "input_shapes": [[32]], "kwargs": {"width": 32}}}
    cfg = validate({"models": models})
    wl = make_workload(load_model("act", cfg["models"]["act"]), 4, "training")
    configs = catalog(extract(wl))
    row = configs[(configs["op_type"] == "ReLU") & configs["params"].str.contains('"inplace":true')].iloc[0]
    rep = build(row.to_dict(), ModelCache(cfg["models"], "cpu", "float32"), "cpu")
    assert set(rep.prepare) == {"forward"}
    forward = rep.phases["forward"]
    with rep.context():
        rep.prepare["forward"]()
        with Ops() as timed:
            out = forward()
        with Ops() as alone:
            forward()
    assert timed.seen[0] == "relu_" and "clone" not in timed.seen  # (autograd saves its output: a detach)
    assert alone.seen == ["clone"] + timed.seen
    assert out.grad_fn is not None and all(t.grad_fn is None for t in rep.inputs)  # the leaf input is untouched
    plain = configs[(configs["op_type"] == "ReLU") & configs["params"].str.contains('"inplace":false')].iloc[0]
    assert build(plain.to_dict(), ModelCache(cfg["models"], "cpu", "float32"), "cpu").prepare == {}


def test_chunks_partition_configurations(configs):
    parts = [set(configs.loc[configs["config_id"].map(lambda c: chunk_of(c, 3)) == k, "config_id"]) for k in range(3)]
    assert set().union(*parts) == set(configs["config_id"]) and sum(map(len, parts)) == len(configs)


def test_functional_ops_replay_through_the_python_binding_a_model_calls():
    x = torch.randn(4, 6)
    view = python_binding(op_overload("aten.view.default"), [x, [2, 12]], {})
    assert view is torch.Tensor.view and torch.equal(view(x, [2, 12]), x.view(2, 12))
    cat = python_binding(op_overload("aten.cat.default"), [[x, x], 1], {})
    assert cat is torch.cat and cat([x, x], 1).shape == (4, 12)
    # no public binding returns the same result: the overload itself
    index = op_overload("aten.index.Tensor")
    assert python_binding(index, [x, [torch.tensor([0, 2])]], {}) is index


def test_refresher_rewrites_large_inputs_in_place_with_their_own_values():
    from torch.utils._python_dispatch import TorchDispatchMode

    from opcost.model.replay import PARALLEL_NUMEL

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append((str(func.overloadpacket), args[0].numel() if args else 0))
            return func(*args, **(kwargs or {}))

    x = torch.randn(PARALLEL_NUMEL, requires_grad=True)
    idx = torch.randint(0, 9, (PARALLEL_NUMEL + 1,))
    flags = torch.rand(2 * PARALLEL_NUMEL) < 0.5
    small = torch.randn(PARALLEL_NUMEL - 1)
    before = [t.detach().clone() for t in (x, idx, flags, small)]
    y = (x * 2).sum()  # a graph holding x: a version bump would break its backward
    refresh = refresher([x, idx, flags, small, torch.empty(0)])
    with torch.inference_mode(), Ops() as ops:
        refresh()
    # each large tensor rewritten once by a (parallel) in-place kernel; the small one left alone
    assert sorted(ops.seen) == sorted([("aten.mul_", PARALLEL_NUMEL), ("aten.bitwise_or_", PARALLEL_NUMEL + 1),
                                       ("aten.bitwise_or_", 2 * PARALLEL_NUMEL)])
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, (x, idx, flags, small)))
    y.backward()
    assert torch.equal(x.grad, torch.full((PARALLEL_NUMEL,), 2.0))
    assert refresher([small, torch.empty(0)]) is None
